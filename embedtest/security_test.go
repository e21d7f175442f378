package embedtest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/embedtest"
)

// readCert parses the first certificate of a PEM file.
func readCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", file)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// mustFail checks that a request through cli fails within a short deadline.
func mustFail(t *testing.T, ctx context.Context, cli *clientv3.Client, what string) error {
	t.Helper()
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := cli.Get(gctx, "tls/k")
	if err == nil {
		t.Errorf("%s: Get succeeded", what)
	}
	return err
}

// TestTLS: members serve https only, with certificates generated at start;
// the cluster's clients (also through a Link and per member) use them, and
// clients in plain text, without a client certificate or trusting another
// CA get nothing.
func TestTLS(t *testing.T) {
	start := time.Now()
	c := embedtest.Start(t, embedtest.WithTLS())
	ctx := testContext(t)

	for _, ep := range c.Endpoints() {
		if !strings.HasPrefix(ep, "https://127.0.0.1:") {
			t.Errorf("endpoint %q, want https://127.0.0.1:port", ep)
		}
	}
	for _, m := range c.Members() {
		if !strings.HasPrefix(m.Endpoint(), "https://") || !strings.HasPrefix(m.PeerURL(), "http://") {
			t.Errorf("%s: endpoint %q, peer URL %q: want https clients, plain peers", m.Name(), m.Endpoint(), m.PeerURL())
		}
	}

	// The generated files: a CA, a server certificate for 127.0.0.1 and
	// localhost, a client certificate; ECDSA P-256, valid for about a day.
	caFile, certFile, keyFile := c.TLSFiles()
	for _, f := range []string{caFile, certFile, keyFile} {
		if !strings.HasPrefix(f, filepath.Join(c.Dir(), "tls")+string(filepath.Separator)) {
			t.Errorf("TLS file %q is not under the cluster's directory", f)
		}
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("client key %s: %v, mode %v; want readable by its owner only", keyFile, err, fi.Mode())
	}
	ca := readCert(t, caFile)
	server := readCert(t, filepath.Join(filepath.Dir(caFile), "server.crt"))
	clientCert := readCert(t, certFile)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, cert := range []*x509.Certificate{ca, server, clientCert} {
		pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
		if !ok || pub.Curve != elliptic.P256() {
			t.Errorf("%s: key %T, want ECDSA P-256", cert.Subject, cert.PublicKey)
		}
		if cert.NotAfter.Sub(cert.NotBefore) > 25*time.Hour || cert.NotAfter.Before(start.Add(23*time.Hour)) || cert.NotBefore.After(start) {
			t.Errorf("%s: valid %v to %v; want about 24h from now", cert.Subject, cert.NotBefore, cert.NotAfter)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("server certificate for 127.0.0.1: %v", err)
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"}); err != nil {
		t.Errorf("server certificate for localhost: %v", err)
	}
	if _, err := clientCert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if clientCert.Subject.CommonName != "" {
		t.Errorf("client certificate CN %q: etcd would take it as a user name", clientCert.Subject.CommonName)
	}

	// The cluster's clients.
	cli := client(t, c.Client)
	if _, err := cli.Put(ctx, "tls/k", "v"); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members() {
		mcli := client(t, m.Client)
		eventually(t, ctx, m.Name()+" serves tls/k", func(ctx context.Context) error {
			return wantValue(ctx, mcli, "tls/k", "v")
		})
	}
	// The files work as etcdctl's --cacert --cert --key.
	info := transport.TLSInfo{TrustedCAFile: caFile, CertFile: certFile, KeyFile: keyFile}
	tlsCfg, err := info.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.ClientConfig()
	cfg.TLS = tlsCfg
	fcli := client(t, func() (*clientv3.Client, error) { return clientv3.New(cfg) })
	if err := wantValue(ctx, fcli, "tls/k", "v"); err != nil {
		t.Errorf("client from TLSFiles: %v", err)
	}

	// A flaky client: TLS through the link's TCP proxies.
	flaky, link, err := c.FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	defer flaky.Close()
	for _, ep := range link.Endpoints() {
		if !strings.HasPrefix(ep, "https://") {
			t.Errorf("link endpoint %q, want https", ep)
		}
	}
	if _, err := flaky.Put(ctx, "tls/flaky", "v"); err != nil {
		t.Fatal(err)
	}
	link.Cut()
	if err := mustFail(t, ctx, flaky, "through a cut link"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get through a cut link = %v, want deadline exceeded", err)
	}
	link.Restore()
	eventually(t, ctx, "flaky client after Restore", func(ctx context.Context) error {
		_, err := flaky.Get(ctx, "tls/flaky")
		return err
	})

	// Clients that must get nothing.
	bad := func(what string, mod func(*clientv3.Config)) {
		cfg := c.ClientConfig()
		cfg.DialTimeout = 2 * time.Second
		mod(&cfg)
		bcli, err := clientv3.New(cfg)
		if err != nil {
			return // refused at once: fine
		}
		defer bcli.Close()
		mustFail(t, ctx, bcli, what)
	}
	bad("plain text", func(cfg *clientv3.Config) {
		cfg.TLS = nil
		for i, ep := range cfg.Endpoints {
			cfg.Endpoints[i] = "http://" + strings.TrimPrefix(ep, "https://")
		}
	})
	bad("no client certificate", func(cfg *clientv3.Config) { cfg.TLS.Certificates = nil })
	other := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithTLS())
	bad("another CA", func(cfg *clientv3.Config) { cfg.TLS = other.ClientTLS() })

	// ClientTLS hands out copies.
	a := c.ClientTLS()
	a.InsecureSkipVerify = true
	if c.ClientTLS().InsecureSkipVerify {
		t.Error("ClientTLS returned a shared configuration")
	}
}

// TestNoSecurity: without the options, nothing of them shows.
func TestNoSecurity(t *testing.T) {
	if ca, cert, key := shared.TLSFiles(); ca != "" || cert != "" || key != "" {
		t.Errorf("TLSFiles = %q %q %q, want nothing", ca, cert, key)
	}
	if shared.ClientTLS() != nil {
		t.Error("ClientTLS without WithTLS")
	}
	if cfg := shared.ClientConfig(); cfg.TLS != nil || cfg.Username != "" || cfg.Password != "" {
		t.Errorf("ClientConfig has TLS %v, user %q", cfg.TLS != nil, cfg.Username)
	}
	if _, err := os.Stat(filepath.Join(shared.Dir(), "tls")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tls directory without WithTLS: %v", err)
	}
}

// TestAuth: WithAuth enables auth with a root user; the cluster's clients
// log in as root, ClientAs as anyone, and etcd enforces the roles. With TLS
// too, a client certificate alone (no common name) grants nothing.
func TestAuth(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithTLS(), embedtest.WithAuth("rootpw"))
	ctx := testContext(t)
	root := client(t, c.Client)
	if cfg := c.ClientConfig(); cfg.Username != "root" || cfg.Password != "rootpw" || cfg.TLS == nil {
		t.Errorf("ClientConfig: user %q, TLS %v; want root over TLS", cfg.Username, cfg.TLS != nil)
	}
	st, err := root.AuthStatus(ctx)
	if err != nil || !st.Enabled {
		t.Fatalf("AuthStatus = %v, %v; want enabled", st, err)
	}
	if u, err := root.UserGet(ctx, "root"); err != nil || len(u.Roles) != 1 || u.Roles[0] != "root" {
		t.Fatalf("root user: %v, %v", u, err)
	}
	for _, m := range c.Members() {
		mcli := client(t, m.Client)
		if _, err := mcli.Put(ctx, "auth/m", m.Name()); err != nil {
			t.Errorf("%s: Member.Client as root: %v", m.Name(), err)
		}
	}

	// A user with one prefix.
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "team-a"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "team-a", "team-a/", clientv3.GetPrefixRangeEnd("team-a/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "alice", "team-a"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	alice := client(t, func() (*clientv3.Client, error) { return c.ClientAs("alice", "alicepw") })
	if _, err := alice.Put(ctx, "team-a/k", "v"); err != nil {
		t.Errorf("alice in her range: %v", err)
	}
	if _, err := alice.Put(ctx, "team-b/k", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("alice outside her range: %v, want permission denied", err)
	}

	if cli, err := c.ClientAs("alice", "wrong"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		if cli != nil {
			cli.Close()
		}
		t.Errorf("ClientAs with a wrong password = %v, want ErrAuthFailed", err)
	}
	anon := client(t, func() (*clientv3.Client, error) { return c.ClientAs("", "") })
	if _, err := anon.Get(ctx, "team-a/k"); !errors.Is(err, rpctypes.ErrPermissionDenied) && !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Errorf("a client with a certificate and no user: %v, want permission denied or user empty", err)
	}
}

// TestAuthPlain: WithAuth without TLS; a client with no user is told so.
func TestAuthPlain(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithAuth("pw"), embedtest.WithAuthTokenTTL(7*time.Second))
	ctx := testContext(t)
	root := client(t, c.Client)
	if _, err := root.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	anon := client(t, func() (*clientv3.Client, error) { return c.ClientAs("", "") })
	if _, err := anon.Get(ctx, "k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Errorf("Get with no user = %v, want ErrUserEmpty", err)
	}
	if got := c.Members()[0].Server().Config().AuthTokenTTL; got != 7 {
		t.Errorf("AuthTokenTTL = %d, want 7", got)
	}
	if got := c.Members()[0].Server().Config().BcryptCost; got != 4 {
		t.Errorf("BcryptCost = %d, want 4", got)
	}
}

// TestJWT: WithJWT makes the members issue ES256 JWTs that expire after the
// WithAuthTokenTTL.
func TestJWT(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithAuth("pw"), embedtest.WithJWT(), embedtest.WithAuthTokenTTL(10*time.Second))
	ctx := testContext(t)
	root := client(t, c.Client)
	if _, err := root.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	at := c.Members()[0].Server().Config().AuthToken
	if !strings.HasPrefix(at, "jwt,") || !strings.Contains(at, "sign-method=ES256") || !strings.Contains(at, "ttl=10s") {
		t.Errorf("AuthToken = %q", at)
	}
	key := filepath.Join(c.Dir(), "tls", "jwt.key")
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("JWT key %s: %v; want readable by its owner only", key, err)
	}

	before := time.Now()
	resp, err := root.Authenticate(ctx, "root", "pw")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(resp.Token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a JWT", resp.Token)
	}
	var head struct{ Alg string }
	var claims struct {
		Username string
		Exp      int64
	}
	for i, v := range []any{&head, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			t.Fatalf("token part %d: %v", i, err)
		}
	}
	exp := time.Unix(claims.Exp, 0)
	if head.Alg != "ES256" || claims.Username != "root" || exp.Before(before.Add(8*time.Second)) || exp.After(time.Now().Add(11*time.Second)) {
		t.Errorf("JWT alg %q user %q expires %v after the request; want ES256, root, 10s", head.Alg, claims.Username, exp.Sub(before))
	}
}

func TestInvalidSecurityOptions(t *testing.T) {
	ctx := testContext(t)
	for name, opts := range map[string][]embedtest.Option{
		"empty root password":  {embedtest.WithAuth("")},
		"zero token TTL":       {embedtest.WithAuthTokenTTL(0)},
		"negative token TTL":   {embedtest.WithAuthTokenTTL(-time.Second)},
		"sub-second token TTL": {embedtest.WithAuthTokenTTL(500 * time.Millisecond)},
		"fractional token TTL": {embedtest.WithAuthTokenTTL(1500 * time.Millisecond)},
		"JWT in a dir with ,":  {embedtest.WithMembers(1), embedtest.WithDir(filepath.Join(t.TempDir(), "a,b")), embedtest.WithJWT()},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := embedtest.New(ctx, opts...)
			if !errors.Is(err, embedtest.ErrInvalidOption) {
				t.Errorf("New = %v, want ErrInvalidOption", err)
			}
			if c != nil {
				t.Error("New returned a cluster with an error")
				_ = c.Close()
			}
		})
	}
}
