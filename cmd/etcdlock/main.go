// Command etcdlock runs a job under a fair etcd lock, shows who holds and
// waits for a lock, takes part in or watches a leader election, shows or
// clears what run --once recorded, breaks a stuck lock, serves the locks
// over HTTP/JSON to programs in any language, and manages a sharded
// deployment: its clusters and the moves of its slots between them. It uses
// the etcdlock library, so it agrees with every Go program that uses it on
// the same names.
//
// Usage:
//
//	etcdlock run NAME [--ttl 10s] [--wait DURATION] [--grace 5s] [--once ID] [--max-runtime D] -- CMD [ARGS...]
//	etcdlock status NAME [-o table|json]
//	etcdlock ls [PREFIX] [-o table|json]
//	etcdlock elect NAME VALUE [-- CMD [ARGS...]]
//	etcdlock observe NAME
//	etcdlock break NAME (--force | --older-than D)
//	etcdlock once (show | clear) NAME
//	etcdlock run --names A,B,C [flags] -- CMD [ARGS...]
//	etcdlock ui [--listen 127.0.0.1:8080] [--prefix P] [--allow-break]
//	etcdlock serve [--listen 127.0.0.1:7070] [--socket PATH] [--auth-token-file F]
//	etcdlock clusters [init | add | set-endpoints | remove | raise ...]
//	etcdlock move (--slot S | --name NAME) (--to CLUSTER [--force-after D] [--resume] | --abort)
//	etcdlock version
//
// A cron line that runs tonight's billing job on exactly one machine, giving
// up if another machine still runs yesterday's after an hour:
//
//	0 2 * * * etcdlock --endpoints etcd-0:2379,etcd-1:2379 run billing/nightly --wait 1h -- /opt/billing/run
//
// Exit codes: see docs/cli.md#exit-codes
//
// # Connection
//
// --endpoints (comma separated) defaults to $ETCDCTL_ENDPOINTS, else
// 127.0.0.1:2379. --cacert, --cert, --key, --insecure-skip-tls-verify, --user,
// --dial-timeout and --command-timeout work as in etcdctl and default to the
// matching ETCDCTL_* variables. The password is never taken from the command
// line, where ps shows it: it comes from --password-file, else
// $ETCDCTL_PASSWORD, else one line of standard input (without echo on a
// terminal); $ETCDCTL_USER may also be "user:password". Every command first
// asks the cluster for its status, bounded by --dial-timeout, so a wrong
// endpoint fails with one line instead of hanging. run and elect then check
// that the user may write under the name (a role without access would
// otherwise make the wait retry forever).
//
// # run
//
// run waits for the lock in first-come order (forever, or up to --wait;
// --wait 0 takes the lock only if it is free and nobody waits), then starts
// CMD directly, without a shell, in its own process group, with
// ETCDLOCK_NAME, ETCDLOCK_KEY and ETCDLOCK_TOKEN added to the inherited
// environment. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to CMD's
// process group. When CMD exits, the lock is released and etcdlock exits with
// CMD's status.
//
// CMD must be dead before the lock can pass to someone else. When the
// session stops getting its lease renewed, etcdlock sends SIGTERM to CMD's
// group at ValidUntil - grace and SIGKILL at ValidUntil (the session's
// conservative estimate of the lease's end), so CMD is dead before etcd can
// expire the lease. --grace (default the smaller of 5s and TTL/2) must be at
// most TTL/2. When the lock is lost without notice (its lease revoked or its
// key deleted by someone else, so another holder may already have it),
// etcdlock sends SIGTERM at once and SIGKILL grace later (or at ValidUntil if
// that comes first); --grace 0 means SIGKILL at once.
//
// On Linux CMD runs under a supervisor process, a child subreaper that
// adopts every process CMD starts (background children, double forks,
// processes that called setsid): the SIGTERM and SIGKILL above go to that
// whole tree, processes CMD leaves behind when it exits are terminated
// before the release, and the whole tree is ended (SIGTERM, SIGKILL at most
// 0.5 s later) when etcdlock dies, even of SIGKILL. Elsewhere CMD's process
// group stands for its tree. No lock can stop a paused or partitioned
// process from writing late, so a CMD that writes shared state must pass
// $ETCDLOCK_TOKEN with every write and have the resource reject tokens lower
// than the highest it has seen. CMD runs in its own process group, so it
// cannot read from an interactive terminal.
//
// # elect and observe
//
// elect campaigns in an election and holds leadership: with a CMD, it runs
// CMD like run does while it leads, with the same signal and loss handling
// (and ETCDLOCK_VALUE set too); without one, it prints every leadership
// change until interrupted, then resigns. observe prints every leader change.
//
// # break
//
// break deletes the key of the holder of a lock (not its lease), so the next
// waiter gets it. The holder's process may still be running and believe it
// holds the lock: break is an operator's last resort, and refuses to run
// without --force.
//
// # ui
//
// ui serves a live status page of every name under --prefix: holders,
// waiters in grant order, elections, a timeline and a chart, driven by one
// etcd watch, plus the same data as JSON and server-sent events. It is
// read-only and on localhost unless --listen and --allow-break say
// otherwise.
//
// # serve
//
// serve gives programs in any language the same locks over HTTP/JSON: a
// hold by stream (POST /v1/hold; the grant lives while the response is
// open), holds by session with keepalives, elections, reads and /metrics.
// Its holders share one FIFO queue and one token sequence with every other
// etcdlock holder of a name. See etcdlock serve --help.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/supervise"
	"github.com/spf13/cobra"
)

// Exit codes reserved by etcdlock (see docs/cli.md#exit-codes).
const (
	exitUsage       = 1
	exitWaitTimeout = 124 // --wait ran out
	exitTimeLimit   = 124 // --max-runtime ran out (timeout(1)'s code, as for --wait)
	exitLost        = 125
	exitNotRunnable = 126
	exitNotFound    = 127
)

// version is the version etcdlock reports; set it at build time with
// -ldflags "-X main.version=v1.2.3". Empty means the module's version.
var version = ""

func main() {
	supervise.RunSubreaper() // when this process is a command's subreaper
	os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// app holds what every subcommand shares.
type app struct {
	conn        connFlags
	stdin       *os.File
	stdout      io.Writer
	stderr      io.Writer
	stopMetrics func() // set while a --metrics-addr server runs
}

// execute runs etcdlock with args and returns its exit code.
func execute(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			a.logf("%s", ee.msg)
		}
		return ee.code
	}
	// cobra's own errors: an unknown command or the arguments of a command
	// that takes none.
	msg := err.Error()
	if strings.HasPrefix(msg, "unknown command") {
		if len(args) > 0 {
			if s := root.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf("; did you mean %s?", strings.Join(s, " or "))
			}
		}
		msg += " (see 'etcdlock --help')"
	}
	a.logf("%s", msg)
	return exitUsage
}

// logf prints one line "etcdlock: ..." on stderr.
func (a *app) logf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "etcdlock: %s\n", oneLine(fmt.Sprintf(format, args...)))
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i, f := range fields {
		fields[i] = strings.TrimSpace(f)
	}
	return strings.Join(fields, " ")
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "etcdlock",
		Short: "Run a job under an etcd lock, see who holds and waits, elect, break",
		Long: `etcdlock runs a command while holding a fair etcd lock (run), shows who holds
and waits for a lock (status, ls, and a live status page: ui), takes part in
or watches a leader election (elect, observe), shows or clears what run --once
recorded (once), breaks a stuck lock (break), serves the locks over HTTP/JSON
to programs in any language (serve) and manages a sharded deployment: its
clusters (clusters) and the moves of its slots between them (move).

Exit codes: see docs/cli.md#exit-codes`,
		SilenceErrors:      true,
		SilenceUsage:       true,
		DisableSuggestions: true, // execute adds them on the same line
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch cmd.Name() {
			case "version", "help", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
				return nil // they do not connect
			}
			return a.conn.resolve(cmd)
		},
	}
	// --version prints what the version command prints.
	root.Version, _ = versionInfo()
	root.SetVersionTemplate(versionText())
	root.CompletionOptions.HiddenDefaultCmd = true
	root.SuggestionsMinimumDistance = 2
	a.conn.register(root)
	root.AddCommand(a.runCmd(), a.statusCmd(), a.lsCmd(), a.electCmd(), a.observeCmd(), a.breakCmd(), a.onceCmd(), a.uiCmd(), a.serveCmd(), a.clustersCmd(), a.moveCmd(), a.versionCmd())
	root.SetFlagErrorFunc(flagError)
	for _, c := range root.Commands() {
		c.SilenceErrors, c.SilenceUsage = true, true
	}
	return root
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of etcdlock",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(a.stdout, versionText())
			return nil
		},
	}
}

// versionText is what version and --version print.
func versionText() string {
	v, client := versionInfo()
	return fmt.Sprintf("etcdlock version: %s\nGo version: %s\netcd client: %s\n", v, runtime.Version(), client)
}

// versionInfo returns etcdlock's version and the etcd client module's.
func versionInfo() (v, client string) {
	v, client = version, "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if v == "" {
			v = "unknown"
		}
		return v, client
	}
	if v == "" {
		v = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == "go.etcd.io/etcd/client/v3" {
			client = d.Version
		}
	}
	return v, client
}
