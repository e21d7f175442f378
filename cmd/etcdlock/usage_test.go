//go:build unix

package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestUsageErrors: bad flags, a missing "--", an empty NAME and the like
// each give one clear line and exit 1, before touching etcd (the endpoint
// is unreachable).
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus", "x", "--", "true"}, "unknown flag: --bogus"},
		{[]string{"run", "x", "--ttl", "soon", "--", "true"}, `invalid argument "soon" for "--ttl"`},
		{[]string{"run", "x", "true"}, `want NAME, got 2 arguments (put "--" before a command)`},
		{[]string{"run", "x", "--once", "1"}, `--once and --max-runtime need a command`},
		{[]string{"run", "x", "--max-runtime", "1m"}, `--once and --max-runtime need a command`},
		{[]string{"run", "x", "--"}, `missing the command after "--"`},
		{[]string{"run", "--", "true"}, `missing NAME before "--"`},
		{[]string{"run", "", "--", "true"}, "NAME must not be empty"},
		{[]string{"run", "x", "--ttl", "0s", "--", "true"}, "want whole seconds of at least 1"},
		{[]string{"run", "x", "--ttl", "1ms", "--", "true"}, "want whole seconds of at least 1 (etcd's unit), not 1ms"},
		{[]string{"run", "x", "--ttl", "1500ms", "--", "true"}, "want whole seconds"},
		{[]string{"run", "x", "--max-runtime", "-1s", "--", "true"}, "--max-runtime must be positive"},
		{[]string{"run", "x", "--grace", "6s", "--", "true"}, "--grace 6s must be at most half the TTL"},
		{[]string{"run", "x", "--wait", "-1s", "--", "true"}, "--wait must not be negative"},
		{[]string{"status", ""}, "NAME must not be empty"},
		{[]string{"status"}, "missing NAME"},
		{[]string{"status", "x", "-o", "yaml"}, "--output must be one of"},
		{[]string{"ls", "a", "b"}, "too many arguments"},
		{[]string{"elect", "x"}, "missing VALUE"},
		{[]string{"elect", "", "v"}, "NAME must not be empty"},
		{[]string{"elect", "x", "v", "--wait", "0s"}, "--wait must be positive"},
		{[]string{"observe", ""}, "NAME must not be empty"},
		{[]string{"break", ""}, "NAME must not be empty"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--user", "root:secret", "status", "x"}, "--user takes only the user name"},
		{[]string{"--dial-timeout", "0s", "status", "x"}, "--dial-timeout must be positive"},
		{[]string{"--cert", "c.pem", "status", "x"}, "--cert and --key go together"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			p := startRaw(t, nil, append([]string{"--endpoints", "127.0.0.1:1"}, tc.args...)...)
			code, out := p.wait()
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			oneErrorLine(t, p.stderr.String(), tc.want)
		})
	}
}

// TestUnreachable: an endpoint that refuses or never answers fails within
// the dial timeout with one line and exit 1.
func TestUnreachable(t *testing.T) {
	// A listener that accepts and never answers: etcd that hangs.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	silent := ln.Addr().String()

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"refused", nil, []string{"--endpoints", "127.0.0.1:1", "status", "x"}, "cannot reach etcd at 127.0.0.1:1: connect: connection refused"},
		{"silent", nil, []string{"--endpoints", silent, "status", "x"}, "cannot reach etcd at " + silent + ": no answer within 1s (--dial-timeout)"},
		{"run", nil, []string{"--endpoints", silent, "run", "x", "--", "true"}, "cannot reach etcd at " + silent},
		{"elect", nil, []string{"--endpoints", "127.0.0.1:1", "elect", "x", "v"}, "cannot reach etcd"},
		{"observe", nil, []string{"--endpoints", "127.0.0.1:1", "observe", "x"}, "cannot reach etcd"},
		{"ETCDCTL_ENDPOINTS", []string{"ETCDCTL_ENDPOINTS=127.0.0.1:1"}, []string{"ls"}, "cannot reach etcd at 127.0.0.1:1"},
		{"ETCDCTL_DIAL_TIMEOUT", []string{"ETCDCTL_ENDPOINTS=" + silent, "ETCDCTL_DIAL_TIMEOUT=1s"}, []string{"ls"}, "no answer within 1s"},
		{"bad ETCDCTL_DIAL_TIMEOUT", []string{"ETCDCTL_DIAL_TIMEOUT=soon"}, []string{"ls"}, `invalid $ETCDCTL_DIAL_TIMEOUT "soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.env == nil {
				args = append([]string{"--dial-timeout", "1s"}, args...)
			}
			p := startRaw(t, tc.env, args...)
			code, out := p.wait()
			elapsed := time.Since(p.start)
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			oneErrorLine(t, p.stderr.String(), tc.want)
			if elapsed > 15*time.Second {
				t.Errorf("took %v with --dial-timeout 1s", elapsed)
			}
		})
	}
}

// TestEnvEndpoints: $ETCDCTL_ENDPOINTS is used when --endpoints is not given.
func TestEnvEndpoints(t *testing.T) {
	p := startRaw(t, []string{"ETCDCTL_ENDPOINTS=" + strings.Join(cluster.Endpoints(), ","), "ETCDCTL_DIAL_TIMEOUT=20s"}, "status", embedtest.UniqueName(t, "cli"))
	if code, out := p.wait(); code != 0 || !strings.Contains(out, "is free") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, p.stderr.String())
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		t.Run(args[0], func(t *testing.T) {
			p := startRaw(t, nil, args...)
			code, out := p.wait()
			if code != 0 || !strings.HasPrefix(out, "etcdlock version: ") || !strings.Contains(out, "etcd client: v3.") || p.stderr.String() != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, p.stderr.String())
			}
		})
	}
}

// TestTTLFlag: --ttl takes etcdctl's whole seconds (10) as well as a
// duration (10s); a value the server raises to its minimum is warned about.
func TestTTLFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{{"10", 10 * time.Second}, {"10s", 10 * time.Second}, {"1m", time.Minute}, {"3", 3 * time.Second}} {
		var f ttlFlag
		if err := f.Set(tc.in); err != nil || time.Duration(f) != tc.want {
			t.Errorf("--ttl %s: %v, %v; want %v", tc.in, time.Duration(f), err, tc.want)
		}
	}
	name := embedtest.UniqueName(t, "cli")
	code, _, stderr := run(t, "run", name, "--ttl", "1", "--grace", "0s", "--", "true")
	if code != 0 {
		t.Fatalf("run --ttl 1: exit %d; stderr: %s", code, stderr)
	}
	oneErrorLine(t, stderr, "warning: etcd granted a TTL of 2s, more than --ttl 1s")
}
