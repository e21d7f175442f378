package main

// This file holds serve's callers' identities: --client-auth etcd (every
// request acts as the etcd user its HTTP Basic credentials name) and TLS on
// serve's own listener (--cert-file, --key-file, --client-ca-file), without
// which credentials would cross the network in the clear, so client-auth
// without TLS takes only loopback and unix sockets.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/serve"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// serveAuth is what serve's identity flags set.
type serveAuth struct {
	clientAuth                      string // "" or "etcd"
	certFile, keyFile, clientCAFile string
}

func (sa *serveAuth) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&sa.clientAuth, "client-auth", "", `"etcd": every request acts as the etcd user its HTTP Basic credentials name (etcd's RBAC decides what it may do)`)
	cmd.Flags().StringVar(&sa.certFile, "cert-file", "", "serve HTTPS with this certificate (PEM; with --key-file)")
	cmd.Flags().StringVar(&sa.keyFile, "key-file", "", "the private key of --cert-file (PEM)")
	cmd.Flags().StringVar(&sa.clientCAFile, "client-ca-file", "", "with --cert-file: require client certificates signed by this CA bundle (PEM)")
}

// check refuses flags that do not go together.
func (sa *serveAuth) check(cmd *cobra.Command, bearer bool) error {
	switch {
	case sa.clientAuth != "" && sa.clientAuth != "etcd":
		return usagef(cmd, "--client-auth %q: the only kind is etcd", sa.clientAuth)
	case sa.clientAuth != "" && bearer:
		return usagef(cmd, "--client-auth etcd and --auth-token-file: choose one (each request carries one Authorization header)")
	case (sa.certFile == "") != (sa.keyFile == ""):
		return usagef(cmd, "--cert-file and --key-file go together")
	case sa.clientCAFile != "" && sa.certFile == "":
		return usagef(cmd, "--client-ca-file needs --cert-file and --key-file")
	}
	return nil
}

// tlsConfig returns the listener's TLS configuration; nil without
// --cert-file.
func (sa *serveAuth) tlsConfig() (*tls.Config, error) {
	if sa.certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(sa.certFile, sa.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--cert-file/--key-file: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if sa.clientCAFile != "" {
		pem, err := os.ReadFile(sa.clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca-file %s holds no PEM certificate", sa.clientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// secure wraps the TCP listeners in TLS (sockets stay as they are), and
// refuses client-auth on a TCP listener that is not loopback without it.
func (sa *serveAuth) secure(lns []net.Listener) ([]net.Listener, error) {
	cfg, err := sa.tlsConfig()
	if err != nil {
		return nil, exitf(exitUsage, "%v", err)
	}
	out := make([]net.Listener, len(lns))
	for i, ln := range lns {
		out[i] = ln
		tcp, ok := ln.Addr().(*net.TCPAddr)
		switch {
		case !ok:
		case cfg != nil:
			out[i] = tls.NewListener(ln, cfg)
		case sa.clientAuth != "" && !tcp.IP.IsLoopback():
			return nil, exitf(exitUsage, "--client-auth etcd on %s, which other machines reach, needs --cert-file and --key-file: passwords are not sent in the clear", tcp)
		}
	}
	return out, nil
}

// dialer returns serve's Dialer of the callers' clients: clients of the
// cluster at eps, with the flags' TLS toward etcd, logged in as the
// caller. It first checks that etcd's auth is on (else any password would
// do).
func (a *app) dialer(ctx context.Context, cli *clientv3.Client) (serve.Dialer, error) {
	_, err := cli.Authenticate(ctx, "etcdlock-serve-probe", "")
	if errors.Is(err, rpctypes.ErrAuthNotEnabled) {
		return nil, exitf(exitUsage, "--client-auth etcd: etcd's auth is not enabled, so it would take any password (etcdctl auth enable)")
	}
	eps := cli.Endpoints()
	tlsCfg, err := a.conn.tlsConfig(eps)
	if err != nil {
		return nil, exitf(exitUsage, "TLS: %v", err)
	}
	return func(_ context.Context, user, password string) (*clientv3.Client, error) {
		if user == "" || password == "" { // clientv3 would not log in: it would act as serve's TLS identity
			return nil, rpctypes.ErrAuthFailed
		}
		return clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsCfg, Username: user, Password: password,
			DialTimeout: a.conn.dialTimeout, DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 6 * time.Second,
			Logger: a.logger()})
	}, nil
}
