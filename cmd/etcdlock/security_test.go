//go:build unix

package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// teams is a cluster with TLS (mutual) and auth on, where user alice may
// use only the names under team-a/ and bob only those under team-b/.
type teams struct {
	c                      *embedtest.Cluster
	root, alice, bob       *clientv3.Client
	rootPW, alicePW, bobPW string
	pwFile                 string // alice's password, in a file
	tls                    []string
}

// secret returns a password that no other string in the test contains.
func secret(t testing.TB, who string) string {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return who + "-pw-" + hex.EncodeToString(b[:])
}

func startTeams(t *testing.T) *teams {
	t.Helper()
	tm := &teams{rootPW: secret(t, "root"), alicePW: secret(t, "alice"), bobPW: secret(t, "bob")}
	tm.c = embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithTLS(), embedtest.WithAuth(tm.rootPW))
	var err error
	if tm.root, err = tm.c.Client(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tm.root.Close() })
	ctx := embedtest.Context(t, long)
	for _, team := range []struct{ role, user, pw, prefix string }{
		{"team-a", "alice", tm.alicePW, "team-a/"},
		{"team-b", "bob", tm.bobPW, "team-b/"},
	} {
		p := layout.ListPrefix(team.prefix)
		for _, step := range []func() error{
			func() error { _, err := tm.root.RoleAdd(ctx, team.role); return err },
			func() error {
				_, err := tm.root.RoleGrantPermission(ctx, team.role, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			},
			func() error { _, err := tm.root.UserAdd(ctx, team.user, team.pw); return err },
			func() error { _, err := tm.root.UserGrantRole(ctx, team.user, team.role); return err },
		} {
			if err := step(); err != nil {
				t.Fatalf("set up %s: %v", team.role, err)
			}
		}
	}
	for _, u := range []struct {
		cli  **clientv3.Client
		name string
		pw   string
	}{{&tm.alice, "alice", tm.alicePW}, {&tm.bob, "bob", tm.bobPW}} {
		cli, err := tm.c.ClientAs(u.name, u.pw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		*u.cli = cli
	}
	tm.pwFile = filepath.Join(t.TempDir(), "alice.pw")
	if err := os.WriteFile(tm.pwFile, []byte(tm.alicePW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, cert, key := tm.c.TLSFiles()
	tm.tls = []string{"--endpoints", strings.Join(tm.c.Endpoints(), ","), "--cacert", ca, "--cert", cert, "--key", key,
		"--dial-timeout", "20s", "--command-timeout", "20s"}
	return tm
}

// secrets lists every password of the cluster.
func (tm *teams) secrets() []string { return []string{tm.rootPW, tm.alicePW, tm.bobPW} }

// noSecret fails the test if any password appears in texts.
func (tm *teams) noSecret(t testing.TB, where string, texts ...string) {
	t.Helper()
	for _, text := range texts {
		for _, pw := range tm.secrets() {
			if strings.Contains(text, pw) {
				t.Errorf("a password appears in %s: %q", where, text)
			}
		}
	}
}

// aliceVia is how alice gives her password: the flags, environment and
// stdin of each way.
type aliceVia struct {
	name  string
	args  []string
	env   []string
	stdin string
}

func (tm *teams) ways() []aliceVia {
	return []aliceVia{
		{"password file", []string{"--user", "alice", "--password-file", tm.pwFile}, nil, ""},
		{"ETCDCTL_PASSWORD", []string{"--user", "alice"}, []string{"ETCDCTL_PASSWORD=" + tm.alicePW}, ""},
		{"stdin", []string{"--user", "alice"}, nil, tm.alicePW + "\n"},
		{"ETCDCTL_USER", nil, []string{"ETCDCTL_USER=alice:" + tm.alicePW}, ""},
	}
}

// run runs etcdlock as alice (the password given the way via says) with
// the TLS flags and args, and checks that no password shows in its output.
func (tm *teams) run(t *testing.T, via aliceVia, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startIn(t, via.stdin, via.env, append(append(append([]string{}, tm.tls...), via.args...), args...)...)
	code, stdout = p.wait()
	stderr = p.stderr.String()
	tm.noSecret(t, "the output of etcdlock "+strings.Join(args, " "), stdout, stderr)
	return code, stdout, stderr
}

// otherCA writes a CA certificate that signed nothing of the cluster's.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "some other CA"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "other-ca.crt")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// withFlag returns args with flag's value replaced (or the flag removed
// when value is "").
func withFlag(args []string, flag, value string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			if value != "" {
				out = append(out, flag, value)
			}
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// TestSecurityArgv: the password is in neither the command line of a
// running etcdlock (what ps shows) nor the environment of the command it
// runs, however it was given.
func TestSecurityArgv(t *testing.T) {
	tm := startTeams(t)
	for i, via := range tm.ways() {
		t.Run(via.name, func(t *testing.T) {
			p := startIn(t, via.stdin, via.env, append(append(append([]string{}, tm.tls...), via.args...),
				"run", fmt.Sprintf("team-a/argv-%d", i), "--", "/bin/sh", "-c", `echo "child $$"; exec sleep 600`)...)
			line := p.waitLine("child ")
			child, err := strconv.Atoi(strings.TrimPrefix(line, "child "))
			if err != nil {
				t.Fatalf("child pid in %q: %v", line, err)
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(cmdline, []byte("team-a/argv")) {
				t.Fatalf("cmdline %q is not etcdlock's", cmdline)
			}
			tm.noSecret(t, "etcdlock's command line", string(cmdline))
			for _, f := range []string{"cmdline", "environ"} {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", child, f))
				if err != nil {
					t.Fatal(err)
				}
				tm.noSecret(t, "the command's "+f, string(b))
			}
			p.signal(syscall.SIGTERM)
			if code, _ := p.wait(); code != 128+int(syscall.SIGTERM) {
				t.Errorf("exit %d after SIGTERM, want %d; stderr: %s", code, 128+int(syscall.SIGTERM), p.stderr.String())
			}
			tm.noSecret(t, "stderr", p.stderr.String())
		})
	}
}
