//go:build unix

package main

import (
	"go/parser"
	"go/token"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestOperatorPapercuts: what an operator reads says what happened.
func TestOperatorPapercuts(t *testing.T) {
	t.Run("ls with nothing held says so", func(t *testing.T) {
		code, out, _ := run(t, "ls", embedtest.UniqueName(t, "cli"))
		if code != 0 || !strings.Contains(out, "has a holder") || strings.Contains(out, "NAME") {
			t.Fatalf("exit %d, stdout %q", code, out)
		}
	})
	t.Run("ui refuses a prefix that is no name and hints at the key prefix", func(t *testing.T) {
		code, _, stderr := run(t, "ui", "--prefix", "bad\xff")
		if code != exitUsage || !strings.Contains(stderr, "UTF-8") {
			t.Errorf("invalid UTF-8: exit %d, stderr %q", code, stderr)
		}
		p := start(t, "ui", "--listen", "127.0.0.1:0", "--prefix", "etcdlock/team-a/")
		waitStderr(t, p, regexp.MustCompile(`did you mean "team-a/"\?`))
		p.signal(syscall.SIGINT)
		p.wait()
	})
	t.Run("ui on every address says who can see it", func(t *testing.T) {
		p := start(t, "ui", "--listen", "0.0.0.0:0")
		waitStderr(t, p, regexp.MustCompile(`reachable from other machines`))
		p.signal(syscall.SIGINT)
		p.wait()
		p = start(t, "ui", "--listen", "127.0.0.1:0")
		waitStderr(t, p, regexp.MustCompile(`serving the status page`))
		p.signal(syscall.SIGINT)
		p.wait()
		if strings.Contains(p.stderr.String(), "other machines") {
			t.Errorf("a loopback page warns: %s", p.stderr.String())
		}
	})
}

// TestDefaultEndpointHint: failing to reach the default endpoint says that
// it is the default and how to name another; a given endpoint does not.
func TestDefaultEndpointHint(t *testing.T) {
	if c, err := net.DialTimeout("tcp", defaultEndpoint, time.Second); err == nil {
		c.Close()
		t.Skipf("something listens on %s", defaultEndpoint)
	}
	p := startRaw(t, nil, "--dial-timeout", "1s", "status", "x")
	if code, _ := p.wait(); code != exitUsage {
		t.Fatalf("exit %d, want 1; stderr: %s", code, p.stderr.String())
	}
	stderr := p.stderr.String()
	oneErrorLine(t, stderr, "cannot reach etcd at "+defaultEndpoint)
	for _, want := range []string{"default", "--endpoints", "ETCDCTL_ENDPOINTS"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not mention %s", stderr, want)
		}
	}
	p = startRaw(t, nil, "--dial-timeout", "1s", "--endpoints", "127.0.0.1:1", "status", "x")
	p.wait()
	if stderr := p.stderr.String(); strings.Contains(stderr, "default") {
		t.Errorf("a given endpoint is called the default: %q", stderr)
	}
}

// TestUnknownFlagSuggestion: a mistyped flag gets the command's flag it is
// closest to, on the same one line; a flag like none gets no guess.
func TestUnknownFlagSuggestion(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"run", "--wiat", "5s", "x", "--", "true"}, "unknown flag: --wiat; did you mean --wait?", ""},
		{[]string{"run", "x", "--max-runtim=1m", "--", "true"}, "did you mean --max-runtime?", ""},
		{[]string{"--dial-timout", "1s", "status", "x"}, "did you mean --dial-timeout?", ""},
		{[]string{"status", "x", "--endpoint", "127.0.0.1:1"}, "did you mean --endpoints?", ""},
		{[]string{"run", "--bogus", "x", "--", "true"}, "unknown flag: --bogus (see", "did you mean"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			p := startRaw(t, nil, append([]string{"--endpoints", "127.0.0.1:1"}, tc.args...)...)
			if code, _ := p.wait(); code != exitUsage {
				t.Errorf("exit %d, want 1", code)
			}
			stderr := p.stderr.String()
			oneErrorLine(t, stderr, tc.want)
			if tc.not != "" && strings.Contains(stderr, tc.not) {
				t.Errorf("stderr %q has %q", stderr, tc.not)
			}
		})
	}
}

// TestUIServingLine: the ui's first line names what it shows: all names
// without --prefix, else the prefix, quoted.
func TestUIServingLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `serving the status page of all names on http://`},
		{[]string{"--prefix", "team-a/"}, `serving the status page of the names under "team-a/" on http://`},
	} {
		p := start(t, append([]string{"ui", "--listen", "127.0.0.1:0"}, tc.args...)...)
		waitStderr(t, p, regexp.MustCompile(`serving the status page`))
		p.signal(syscall.SIGINT)
		p.wait()
		if stderr := p.stderr.String(); !strings.Contains(stderr, tc.want) {
			t.Errorf("ui %v: stderr %q, want %q", tc.args, stderr, tc.want)
		}
	}
}

// TestHelpNamesEveryCommand: the root's help and the package doc name
// every command, and the exit codes are written in one place only, which
// the root's help, run's help and the package doc point to.
func TestHelpNamesEveryCommand(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	pkgDoc := f.Doc.Text()
	_, rootHelp, _ := run(t, "--help")
	rootHelp, _, _ = strings.Cut(rootHelp, "\nUsage:")
	_, runHelp, _ := run(t, "run", "--help")
	runHelp, _, _ = strings.Cut(runHelp, "\nUsage:")
	root := (&app{}).rootCmd()
	for _, c := range root.Commands() {
		name := c.Name()
		if c.Hidden || name == "help" || name == "version" {
			continue
		}
		if !regexp.MustCompile(`[(\s]` + name + `[),]`).MatchString(rootHelp) {
			t.Errorf("etcdlock --help does not name %s:\n%s", name, rootHelp)
		}
		if !strings.Contains(pkgDoc, "\tetcdlock "+name+" ") {
			t.Errorf("the package doc's usage leaves out %s", name)
		}
	}
	const pointer = "Exit codes: see docs/cli.md#exit-codes"
	for what, text := range map[string]string{"etcdlock --help": rootHelp, "run --help": runHelp, "the package doc": pkgDoc} {
		if !strings.Contains(oneLine(text), pointer) {
			t.Errorf("%s does not say %q", what, pointer)
		}
		if regexp.MustCompile(`\b12[67]\s+(CMD|command)`).MatchString(text) {
			t.Errorf("%s still copies the exit codes:\n%s", what, text)
		}
	}
}
