//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSecurityCLI: against a cluster with TLS and auth, alice (team-a)
// runs, inspects and breaks team-a/ locks with --cacert --cert --key
// --user and her password from a file, $ETCDCTL_PASSWORD or stdin; every
// command on team-b/ names fails with one line naming the refusal; TLS
// mistakes fail with one line; no password ever shows in the output.
func TestSecurityCLI(t *testing.T) {
	tm := startTeams(t)
	t.Run("run in the role", func(t *testing.T) { securityRunInRole(t, tm) })
	// bob holds team-b/job; alice holds team-a/held.
	bl, al := holdTeamLocks(t, tm)
	before := tm.bobKeys(t)
	t.Run("outside the role", func(t *testing.T) { securityOutsideRole(t, tm, bl, before) })
	t.Run("inspect in the role", func(t *testing.T) { securityInspectInRole(t, tm, al) })
	t.Run("TLS mistakes", func(t *testing.T) { securityTLSMistakes(t, tm) })
	t.Run("credential mistakes", func(t *testing.T) { securityCredentialMistakes(t, tm) })
	t.Run("debug logs", func(t *testing.T) { securityDebugLogs(t, tm) })
}

// holdTeamLocks makes bob hold team-b/job (bl) and alice team-a/held (al)
// with library sessions.
func holdTeamLocks(t *testing.T, tm *teams) (bl, al *etcdlock.Lock) {
	t.Helper()
	ctx := embedtest.Context(t, long)
	bs := locktest.OpenSession(t, tm.bob, etcdlock.WithIdentity("bob/1"))
	bl, err := etcdlock.NewMutex(bs, "team-b/job").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, al = hold(t, tm.alice, "team-a/held", "alice/lib")
	return bl, al
}

// bobKeys lists the keys under team-b/, as root sees them.
func (tm *teams) bobKeys(t *testing.T) string {
	t.Helper()
	resp, err := tm.root.Get(embedtest.Context(t, long), layout.ListPrefix("team-b/"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return strings.Join(keys, " ")
}

// securityRunInRole: alice runs a command on a team-a/ name, each way of
// giving her password.
func securityRunInRole(t *testing.T, tm *teams) {
	for i, via := range tm.ways() {
		t.Run(via.name, func(t *testing.T) {
			code, out, stderr := tm.run(t, via, "run", fmt.Sprintf("team-a/job-%d", i), "--", "/bin/sh", "-c", `echo "ran with token $ETCDLOCK_TOKEN"`)
			if code != 0 || !strings.HasPrefix(out, "ran with token ") {
				t.Fatalf("exit %d, stdout %q; stderr: %s", code, out, stderr)
			}
		})
	}
}

// securityOutsideRole: every command of alice's on team-b/ names fails with
// one line and exit 1, and leaves bob's keys and lock bl alone.
func securityOutsideRole(t *testing.T, tm *teams, bl *etcdlock.Lock, before string) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "team-b/job", "--", "true"}, `cannot use "team-b/job": permission denied`},
		{[]string{"run", "team-b/job", "--wait", "0", "--", "true"}, `"team-b/job": permission denied`},
		{[]string{"run", "team-b/free", "--", "true"}, `cannot use "team-b/free": permission denied`},
		{[]string{"run", "team-b/job", "--semaphore", "2", "--", "true"}, `"team-b/job": permission denied`},
		{[]string{"elect", "team-b/leader", "v"}, `cannot use "team-b/leader": permission denied`},
		{[]string{"break", "team-b/job", "--force"}, "permission denied"},
		{[]string{"status", "team-b/job"}, "permission denied"},
		{[]string{"ls", "team-b/"}, "permission denied"},
		{[]string{"ls"}, "permission denied"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, stderr := tm.run(t, tm.ways()[0], tc.args...)
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			oneErrorLine(t, stderr, tc.want)
		})
	}
	if after := tm.bobKeys(t); after != before {
		t.Errorf("keys under team-b/ changed: %q, were %q", after, before)
	}
	if err := bl.Context().Err(); err != nil {
		t.Errorf("bob's lock ended: %v (%v)", err, context.Cause(bl.Context()))
	}
}

// securityInspectInRole: alice's status, ls, observe and break of team-a/
// names work; break ends her library lock al.
func securityInspectInRole(t *testing.T, tm *teams, al *etcdlock.Lock) {
	via := tm.ways()[1]
	code, out, stderr := tm.run(t, via, "status", "team-a/held")
	if code != 0 || !strings.Contains(out, "alice/lib") || !strings.Contains(out, al.Token().String()) {
		t.Errorf("status: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = tm.run(t, via, "ls", "team-a/")
	if code != 0 || !strings.Contains(out, "team-a/held") || strings.Contains(out, "team-b/") {
		t.Errorf("ls team-a/: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	obs := startIn(t, "", via.env, append(append(append([]string{}, tm.tls...), via.args...), "observe", "team-a/leader")...)
	obs.waitLine("no leader")
	obs.signal(syscall.SIGTERM)
	_, rest := obs.wait()
	tm.noSecret(t, "observe's output", rest, obs.stderr.String())

	code, out, stderr = tm.run(t, via, "break", "team-a/held", "--force")
	if code != 0 || !strings.Contains(out, al.Key()) {
		t.Errorf("break team-a/held: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	select {
	case <-al.Context().Done():
	case <-time.After(long):
		t.Error("alice's lock was not broken")
	}
}

// securityTLSMistakes: a wrong CA, no client certificate, plain text to a
// TLS port and TLS flags with http:// fail at once with one line; an
// endpoint without a scheme uses TLS and works.
func securityTLSMistakes(t *testing.T, tm *teams) {
	via := tm.ways()[0]
	for _, tc := range []struct {
		name string
		tls  []string
		want string
	}{
		{"wrong CA", withFlag(tm.tls, "--cacert", otherCA(t)), "certificate signed by unknown authority"},
		{"no client certificate", withFlag(withFlag(tm.tls, "--cert", ""), "--key", ""), "certificate"},
		{"plain text to a TLS port", withFlag(withFlag(withFlag(withFlag(tm.tls, "--cacert", ""), "--cert", ""), "--key", ""),
			"--endpoints", strings.ReplaceAll(strings.Join(tm.c.Endpoints(), ","), "https://", "http://")), "if it serves TLS, give an https:// endpoint"},
		{"TLS flags with an http:// endpoint", withFlag(tm.tls, "--endpoints", strings.ReplaceAll(strings.Join(tm.c.Endpoints(), ","), "https://", "http://")),
			"is plain text, yet --cacert"},
		{"no scheme", withFlag(tm.tls, "--endpoints", strings.ReplaceAll(strings.Join(tm.c.Endpoints(), ","), "https://", "")), ""},
		{"TLS to a plain-text server", withFlag(tm.tls, "--endpoints", "https://"+strings.TrimPrefix(cluster.Endpoints()[0], "http://")),
			"the server does not seem to speak TLS"},
		{"a CA file without a certificate", withFlag(tm.tls, "--cacert", notACert(t)), "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			p := startIn(t, via.stdin, via.env, append(append(append([]string{}, tc.tls...), via.args...), "status", "team-a/job")...)
			code, out := p.wait()
			stderr := p.stderr.String()
			tm.noSecret(t, "the output", out, stderr)
			took := time.Since(start).Round(time.Millisecond)
			if tc.want == "" { // works: TLS is used without a scheme
				if code != 0 || !strings.Contains(out, "is free") {
					t.Errorf("exit %d, stdout %q, stderr %q; want the status", code, out, stderr)
				}
				return
			}
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			oneErrorLine(t, stderr, tc.want)
			if took > 10*time.Second {
				t.Errorf("failed only after %v; want at once, not after --dial-timeout", took)
			}
			t.Logf("%s: %q after %v", tc.name, strings.TrimSpace(stderr), took)
		})
	}
}

// securityCredentialMistakes: a wrong password, a password in --user and no
// user fail with one line and exit 1.
func securityCredentialMistakes(t *testing.T, tm *teams) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"wrong password", []string{"ETCDCTL_PASSWORD=" + tm.bobPW}, []string{"--user", "alice"}, "authentication failed"},
		{"wrong password in ETCDCTL_USER", []string{"ETCDCTL_USER=alice:" + tm.bobPW}, nil, "authentication failed"},
		{"password on the command line", nil, []string{"--user", "alice:" + tm.alicePW}, "--user takes only the user name"},
		{"no user", nil, nil, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startIn(t, "", tc.env, append(append(append([]string{}, tm.tls...), tc.args...), "status", "team-a/job")...)
			code, out := p.wait()
			stderr := p.stderr.String()
			tm.noSecret(t, "the output", out, stderr)
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			oneErrorLine(t, stderr, tc.want)
		})
	}
}

// securityDebugLogs: --debug logs to stderr, and no password shows there.
func securityDebugLogs(t *testing.T, tm *teams) {
	for i, via := range tm.ways() {
		t.Run(via.name, func(t *testing.T) {
			code, out, stderr := tm.run(t, via, append([]string{"--debug"}, "run", fmt.Sprintf("team-a/debug-%d", i), "--", "true")...)
			if code != 0 || stderr == "" {
				t.Errorf("exit %d, stdout %q; stderr %d bytes", code, out, len(stderr))
			}
		})
	}
}

// notACert returns a file that holds no certificate.
func notACert(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
