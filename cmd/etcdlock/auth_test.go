//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// startAlice starts a cluster of TestAuth's own with auth on (root's
// password rootpw), where alice (password alicepw, also in pwFile) may use
// only the names under team-a/; eps are the flags to reach it.
func startAlice(t *testing.T) (eps []string, pwFile string) {
	t.Helper()
	// A cluster of its own: auth would disturb the other tests.
	c := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithAuth("rootpw"))
	cli, err := c.Client() // root
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx := embedtest.Context(t, long)
	prefix := layout.ListPrefix("team-a/")
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "team-a"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "team-a", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserGrantRole(ctx, "alice", "team-a"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	pwFile = filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("alicepw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--endpoints", strings.Join(c.Endpoints(), ","), "--dial-timeout", "20s", "--command-timeout", "20s"}, pwFile
}

// TestAuth: on a cluster with authentication, the password comes from a
// file, $ETCDCTL_PASSWORD, stdin or $ETCDCTL_USER=user:password; missing
// or wrong credentials and names outside the user's role fail at once with
// one line and exit 1 (the library would retry a denied write forever).
func TestAuth(t *testing.T) {
	eps, pwFile := startAlice(t)
	job := append([]string{"run", "team-a/job", "--"}, sh(`read line; echo "ran, then read: $line"`)...)

	for _, tc := range []struct {
		name  string
		stdin string
		env   []string
		args  []string
	}{
		{"password file", "for the command\n", nil, append([]string{"--user", "alice", "--password-file", pwFile}, job...)},
		{"ETCDCTL_PASSWORD", "for the command\n", []string{"ETCDCTL_PASSWORD=alicepw"}, append([]string{"--user", "alice"}, job...)},
		{"stdin", "alicepw\nfor the command\n", nil, append([]string{"--user", "alice"}, job...)},
		{"ETCDCTL_USER", "for the command\n", []string{"ETCDCTL_USER=alice:alicepw"}, job},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startIn(t, tc.stdin, tc.env, append(eps, tc.args...)...)
			code, out := p.wait()
			if code != 0 || out != "ran, then read: for the command" {
				t.Fatalf("exit %d, stdout %q; stderr: %s", code, out, p.stderr.String())
			}
		})
	}

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no user", nil, []string{"status", "team-a/job"}, "the cluster has authentication on: give --user"},
		{"wrong password", []string{"ETCDCTL_PASSWORD=nope"}, []string{"--user", "alice", "status", "team-a/job"}, "authentication failed"},
		{"run outside the role", []string{"ETCDCTL_PASSWORD=alicepw"}, []string{"--user", "alice", "run", "team-b/job", "--", "true"}, `cannot use "team-b/job": permission denied`},
		{"elect outside the role", []string{"ETCDCTL_PASSWORD=alicepw"}, []string{"--user", "alice", "elect", "team-b/job", "v"}, `cannot use "team-b/job": permission denied`},
		{"status outside the role", []string{"ETCDCTL_PASSWORD=alicepw"}, []string{"--user", "alice", "status", "team-b/job"}, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startRaw(t, tc.env, append(eps, tc.args...)...)
			code, out := p.wait()
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			oneErrorLine(t, p.stderr.String(), tc.want)
		})
	}
}
