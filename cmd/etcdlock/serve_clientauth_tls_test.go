//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it checks serve's TLS flags (--cert-file, --key-file) and refusals.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// serverCert writes a self-signed certificate for 127.0.0.1 and its key,
// and returns their files and a pool that trusts it.
func serverCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "etcdlock serve"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "serve.crt"), filepath.Join(dir, "serve.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeClientAuthRefuses: --client-auth etcd does not start where a
// password could be taken for nothing: on a cluster whose auth is off
// (any password would do), beside a bearer token, or on a TCP address that
// other machines reach without TLS.
func TestServeClientAuthRefuses(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	root := func(args ...string) []string {
		return append(append(append([]string{}, tm.tls...), "--user", "root"), args...)
	}
	env := []string{"ETCDCTL_PASSWORD=" + tm.rootPW}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		env  []string
		args []string
		want string
	}{
		{"auth off", nil, append(endpointFlags(), "serve", "--listen", "127.0.0.1:0", "--client-auth", "etcd"), "auth is not enabled"},
		{"with a bearer token", env, root("serve", "--listen", "127.0.0.1:0", "--client-auth", "etcd", "--auth-token-file", tokenFile), "choose one"},
		{"all interfaces without TLS", env, root("serve", "--listen", "0.0.0.0:0", "--client-auth", "etcd"), "needs --cert-file"},
		{"an unknown kind", env, root("serve", "--client-auth", "ldap"), "the only kind is etcd"},
	} {
		p := startRaw(t, tc.env, tc.args...)
		code, _ := p.wait()
		if code != exitUsage || !strings.Contains(p.stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, %q; want %d saying %q", tc.what, code, p.stderr.String(), exitUsage, tc.want)
		}
	}
}

// TestServeClientAuthTLS: with --cert-file and --key-file, serve takes
// client-auth on every interface, over HTTPS only.
func TestServeClientAuthTLS(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	certFile, keyFile, pool := serverCert(t)
	s := startAuthServer(t, tm, "--listen", "0.0.0.0:0", "--cert-file", certFile, "--key-file", keyFile)
	addr := "127.0.0.1:" + s.addr[strings.LastIndex(s.addr, ":")+1:]
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.CloseIdleConnections)
	req, _ := http.NewRequestWithContext(embedtest.Context(t, long), "GET", "https://"+addr+"/v1/state?name=team-a/x", nil)
	req.SetBasicAuth("alice", tm.alicePW)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's state over HTTPS: %d, want 200", resp.StatusCode)
	}
	plain, err := http.Get("http://" + addr + "/v1/state?name=team-a/x")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode < 400 {
			t.Fatalf("plain HTTP answered %d, want no service", plain.StatusCode)
		}
	}
}

// TestServePythonClientAuth: the Python client holds as an etcd user
// (Basic credentials) over HTTPS: alice's name is granted, bob's refused.
func TestServePythonClientAuth(t *testing.T) {
	t.Parallel() // its own cluster
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("ETCDLOCK_REQUIRE_PYTHON") != "" {
			t.Fatal("python3 is not installed, and ETCDLOCK_REQUIRE_PYTHON is set")
		}
		t.Skip("python3 is not installed (CI installs it)")
	}
	tm := startTeams(t)
	certFile, keyFile, _ := serverCert(t)
	s := startAuthServer(t, tm, "--listen", "127.0.0.1:0", "--cert-file", certFile, "--key-file", keyFile)
	host, port, _ := net.SplitHostPort(s.addr)
	script := `
import ssl, sys
from etcdlock_client import Client, LockError
ctx = ssl.create_default_context(cafile=sys.argv[3])
c = Client(sys.argv[1], int(sys.argv[2]), user="alice", password=sys.argv[4], ssl_context=ctx)
for _ in range(2):
    with c.hold("team-a/py", try_=True) as g:
        print("held", g.token)
try:
    with c.hold("team-b/py", try_=True):
        print("held bob's")
except LockError as e:
    print("refused", e.code)
c.close()
`
	cmd := exec.Command(py, "-c", script, host, port, certFile, tm.alicePW)
	cmd.Dir = filepath.Join("..", "..", "examples", "python")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(out), "held ") != 2 || !strings.Contains(string(out), "refused permission_denied") {
		t.Fatalf("python as alice: %v\n%s", err, out)
	}
}
