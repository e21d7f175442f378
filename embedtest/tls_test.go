package embedtest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

	checkTLSEndpoints(t, c)
	checkTLSFiles(t, c, start)
	checkTLSClients(t, ctx, c)
	checkTLSFlaky(t, ctx, c)
	checkTLSRefused(t, ctx, c)

	// ClientTLS hands out copies.
	a := c.ClientTLS()
	a.InsecureSkipVerify = true
	if c.ClientTLS().InsecureSkipVerify {
		t.Error("ClientTLS returned a shared configuration")
	}
}

// checkTLSEndpoints: c's members serve https to clients, plain text to peers.
func checkTLSEndpoints(t *testing.T, c *embedtest.Cluster) {
	t.Helper()
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
}

// checkTLSFiles checks the files c generated at start.
func checkTLSFiles(t *testing.T, c *embedtest.Cluster, start time.Time) {
	t.Helper()
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
}

// checkTLSClients: c's clients, per member too, and one made from the files
// of TLSFiles reach c.
func checkTLSClients(t *testing.T, ctx context.Context, c *embedtest.Cluster) {
	t.Helper()
	caFile, certFile, keyFile := c.TLSFiles()
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
}

// checkTLSFlaky: c's flaky client speaks TLS through the link; cut, it gets
// nothing; restored, it works again.
func checkTLSFlaky(t *testing.T, ctx context.Context, c *embedtest.Cluster) {
	t.Helper()
	// A flaky client: TLS through the link's TCP proxies.
	flaky, link, err := c.FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flaky.Close() })
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
}

// checkTLSRefused: clients in plain text, without a client certificate or
// trusting another CA get nothing from c.
func checkTLSRefused(t *testing.T, ctx context.Context, c *embedtest.Cluster) {
	t.Helper()
	// Clients that must get nothing.
	mustRefuse(t, ctx, c, "plain text", func(cfg *clientv3.Config) {
		cfg.TLS = nil
		for i, ep := range cfg.Endpoints {
			cfg.Endpoints[i] = "http://" + strings.TrimPrefix(ep, "https://")
		}
	})
	mustRefuse(t, ctx, c, "no client certificate", func(cfg *clientv3.Config) { cfg.TLS.Certificates = nil })
	other := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithTLS())
	mustRefuse(t, ctx, c, "another CA", func(cfg *clientv3.Config) { cfg.TLS = other.ClientTLS() })
}

// mustRefuse checks that a client of c with the configuration mod makes of
// c's gets nothing (if it is made at all) within a short deadline.
func mustRefuse(t *testing.T, ctx context.Context, c *embedtest.Cluster, what string, mod func(*clientv3.Config)) {
	t.Helper()
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
