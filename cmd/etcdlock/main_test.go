//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// The tests build the real binary once and drive it as a subprocess against
// one embedded etcd member shared by the package (each test uses its own
// lock names). Waits are for events (a line of output, a state in etcd),
// with generous deadlines for a busy machine under -race.

var (
	cluster *embedtest.Cluster
	binPath string
)

// long bounds every wait for something that should happen soon.
const long = 30 * time.Second

func TestMain(m *testing.M) {
	if sock := os.Getenv(holdChildEnv); sock != "" {
		os.Exit(holdChild(sock, os.Getenv("ETCDLOCK_TEST_NAME")))
	}
	if addr := os.Getenv(vanishChildEnv); addr != "" {
		os.Exit(vanishChild(addr))
	}
	flag.Parse()
	// The parallel tests run processes and clusters of their own and
	// mostly wait on them (a TTL, an outage, a vanished client).
	locktest.ParallelUnlessSet(4)
	code, err := testMain(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 2
	}
	os.Exit(code)
}

func testMain(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "etcdlock-cli-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "etcdlock")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race") // the CLI's own goroutines get checked too
	}
	build := exec.Command(goTool(), append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("build etcdlock: %w", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := embedtest.New(ctx, embedtest.WithMembers(1))
	cancel()
	if err != nil {
		return 0, fmt.Errorf("start etcd: %w", err)
	}
	cluster = c
	code := m.Run()
	if err := c.Close(); err != nil {
		return code, fmt.Errorf("close etcd: %w", err)
	}
	if code == 0 {
		// The library sessions and clients of the tests are all closed.
		if err := goleak.Find(embedtest.LeakOptions()...); err != nil {
			return 1, fmt.Errorf("goleak: %w", err)
		}
	}
	return code, nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// endpointFlags point the CLI at the shared cluster, with timeouts for a
// busy machine.
func endpointFlags() []string {
	return []string{"--endpoints", strings.Join(cluster.Endpoints(), ","), "--dial-timeout", "20s", "--command-timeout", "20s"}
}

// proc is a running etcdlock.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	lines  chan string // stdout, line by line
	stderr lockedBuffer
	done   chan struct{}
	start  time.Time
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cleanEnv is the test's environment without ETCDCTL_* and ETCDLOCK_*.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCDCTL_") || strings.HasPrefix(kv, "ETCDLOCK_") {
			continue
		}
		env = append(env, kv)
	}
	// A race in the CLI fails its run at once (exit 66), and exit 0 skips
	// the race detector's 1s wait for late reports.
	env = append(env, "GORACE=halt_on_error=1 atexit_sleep_ms=0")
	return append(env, extra...)
}

// startRaw starts etcdlock with exactly args and env added to a clean
// environment. It is killed at the end of the test if still running.
func startRaw(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return startIn(t, "", env, args...)
}

// startIn is startRaw with stdin (none when empty).
func startIn(t testing.TB, stdin string, env []string, args ...string) *proc {
	t.Helper()
	var r io.Reader
	if stdin != "" {
		r = strings.NewReader(stdin)
	}
	return startReading(t, r, env, args...)
}

// startReading is startRaw with stdin read from r (none when nil).
func startReading(t testing.TB, stdin io.Reader, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, lines: make(chan string, 1000), done: make(chan struct{}), start: time.Now()}
	p.cmd = exec.Command(binPath, args...)
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdin = stdin
	p.cmd.Stderr = &p.stderr
	p.cmd.WaitDelay = 2 * time.Second // for the copy of stderr, likewise
	// A pipe of our own rather than StdoutPipe: a grandchild that outlives
	// etcdlock may hold its write end, and the test must not wait for that.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = w
	err = p.cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		r.Close()
	})
	return p
}

// start starts etcdlock with the shared cluster's endpoints.
func start(t testing.TB, args ...string) *proc {
	t.Helper()
	return startRaw(t, nil, append(endpointFlags(), args...)...)
}

// startEnv is start with more environment variables.
func startEnv(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return startRaw(t, env, append(endpointFlags(), args...)...)
}

// waitLine returns the first stdout line (after those already read) that
// contains substr.
func (p *proc) waitLine(substr string) string {
	p.t.Helper()
	deadline := time.After(long)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("etcdlock exited before printing %q; stderr: %s", substr, p.stderr.String())
			}
			if strings.Contains(l, substr) {
				return l
			}
		case <-deadline:
			p.t.Fatalf("no line with %q after %v; stderr: %s", substr, long, p.stderr.String())
		}
	}
}

// wait waits for etcdlock to exit and returns its exit code and the rest of
// its stdout.
func (p *proc) wait() (code int, stdout string) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(long):
		p.t.Fatalf("etcdlock still running after %v; stderr: %s", long, p.stderr.String())
	}
	// What etcdlock and its command wrote is in the pipe; read up to EOF,
	// or give up on it if something that outlived etcdlock keeps it open.
	var rest []string
	grace := time.After(2 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if ok {
				rest = append(rest, l)
				continue
			}
		case <-grace:
			p.t.Logf("stdout still open after etcdlock exited")
		}
		return p.cmd.ProcessState.ExitCode(), strings.Join(rest, "\n")
	}
}

// signal sends sig to etcdlock.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// run runs etcdlock to its end.
func run(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, args...)
	code, stdout = p.wait()
	return code, stdout, p.stderr.String()
}

// hold takes name with a library session of the given identity.
func hold(t testing.TB, cli *clientv3.Client, name, identity string) (*etcdlock.Session, *etcdlock.Lock) {
	t.Helper()
	s := locktest.OpenSession(t, cli, etcdlock.WithIdentity(identity))
	l, err := etcdlock.NewMutex(s, name).Lock(embedtest.Context(t, long))
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

// identities lists the identities of entries.
func identities(es []etcdlock.Entry) []string {
	var ids []string
	for _, e := range es {
		ids = append(ids, e.Identity)
	}
	return ids
}

// oneErrorLine checks that stderr is exactly one line "etcdlock: ..."
// containing want.
func oneErrorLine(t testing.TB, stderr, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "etcdlock: ") || !strings.Contains(lines[0], want) {
		t.Errorf("stderr = %q, want one line \"etcdlock: ...%s...\"", stderr, want)
	}
}

// sh returns the arguments that run script with /bin/sh.
func sh(script string, args ...string) []string {
	return append([]string{"/bin/sh", "-c", script, "sh"}, args...)
}
