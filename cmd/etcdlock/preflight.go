package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The checks that fail fast, with a cause, where the etcd client would
// time out or the library would retry forever: preflight before the
// client connects, precheck before run and elect wait.

// http2Preface is what an HTTP/2 (gRPC) client sends first: the connection
// preface and an empty SETTINGS frame. An etcd member answers it with its
// own SETTINGS frame at once.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// preflight runs dialCheck on every endpoint at once and returns nil as
// soon as one passes, else the first endpoint's error once all failed.
func preflight(ctx context.Context, eps []string, tlsCfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return firstSuccess(eps, func(ep string) error { return dialCheck(ctx, ep, tlsCfg) })
}

// usesTLS tells whether the etcd client speaks TLS to ep: always for
// https:// and unixs://, never for http:// and unix://, and for an endpoint
// without a scheme when TLS is configured.
func usesTLS(ep string, tlsCfg *tls.Config) bool {
	switch {
	case strings.HasPrefix(ep, "https://"), strings.HasPrefix(ep, "unixs://"):
		return true
	case strings.Contains(ep, "://"):
		return false
	}
	return tlsCfg != nil
}

// dialCheck connects to ep as the client would and checks that the server
// answers, so that what the etcd client would only report as a timeout
// fails at once with its cause: a refused connection, an unknown host, a
// TLS handshake the client rejects (a server certificate the CA did not
// sign) or the server rejects (no or a wrong client certificate), or a
// server that speaks TLS to a plain-text client. It sends the HTTP/2
// preface and waits for the server's first frame, within ctx: a server that
// does not answer gives context.DeadlineExceeded, as Status would. Endpoints
// that are not TCP pass.
func dialCheck(ctx context.Context, ep string, tlsCfg *tls.Config) error {
	host, hostname, ok, err := tcpHost(ep)
	if !ok {
		return err
	}
	raw, err := dialTCP(ctx, host)
	if err != nil {
		return err
	}
	conn := raw
	defer func() { _ = conn.Close() }() // a check: nothing was written that a close could lose
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl) // without it the reads end with ctx anyway, only later
	}
	secure := usesTLS(ep, tlsCfg)
	if secure {
		if conn, err = handshake(ctx, raw, tlsCfg, hostname); err != nil {
			return err
		}
	}
	return greet(conn, secure)
}

// tcpHost returns the host:port of ep and its host name; ok is false for an
// endpoint dialCheck does not check (err then says why, or is nil to let
// the client explain).
func tcpHost(ep string) (host, hostname string, ok bool, err error) {
	host = ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return "", "", false, err
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", "", false, nil
		}
		host = u.Host
	}
	hostname, _, err = net.SplitHostPort(host)
	if err != nil {
		return "", "", false, nil // let the client explain
	}
	return host, hostname, true, nil
}

// dialTCP connects to host; its error is the bare cause ("connection
// refused"), without the address the caller names anyway.
func dialTCP(ctx context.Context, host string) (net.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			return nil, oe.Err
		}
		return nil, err
	}
	return raw, nil
}

// handshake does the client's TLS handshake over raw as the etcd client
// would (tlsCfg, ALPN h2, hostname as the server name by default).
func handshake(ctx context.Context, raw net.Conn, tlsCfg *tls.Config, hostname string) (net.Conn, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if tlsCfg != nil {
		cfg = tlsCfg.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = hostname
	}
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		switch {
		case isTimeout(err):
			return tc, context.DeadlineExceeded
		case errors.Is(err, io.EOF) || errors.As(err, new(tls.RecordHeaderError)):
			// A plain-text server closes the connection, or answers in
			// HTTP/2 frames, on a ClientHello.
			return tc, fmt.Errorf("TLS handshake: %w: the server does not seem to speak TLS (give an http:// endpoint and no --cacert, --cert or --insecure-skip-tls-verify, if it serves plain text)", err)
		}
		return tc, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// greet sends the HTTP/2 preface over conn and reads the server's first
// frame, which must be a SETTINGS frame (type 4).
func greet(conn net.Conn, secure bool) error {
	var frame [9]byte
	_, err := io.WriteString(conn, http2Preface)
	if err == nil {
		_, err = io.ReadFull(conn, frame[:])
	}
	switch {
	case err == nil && frame[3] == 0x4:
		return nil
	case err == nil && secure:
		return errors.New("the server does not speak HTTP/2 over TLS: not an etcd member")
	case err == nil:
		return fmt.Errorf("the server does not speak HTTP/2 (it answered %q): not an etcd member, or it serves TLS (then give an https:// endpoint and --cacert)", frame[:])
	case isTimeout(err):
		return context.DeadlineExceeded // what Status would get too
	case secure:
		// With TLS 1.3 the server checks the client's certificate after
		// the client's side of the handshake is done: its refusal comes
		// as an alert on the first read.
		return fmt.Errorf("TLS: %w", err)
	}
	return fmt.Errorf("the server closed the connection without answering in plain text (if it serves TLS, give an https:// endpoint and --cacert): %w", err)
}

// isTimeout reports a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// precheckHeld is precheck on the cluster name lives on (h.clientOf). In a
// sharded deployment whose cluster for name cannot be dialed now, the check
// is left to the acquisition, which says why it cannot be had (or waits
// for it within --wait).
func (a *app) precheckHeld(ctx context.Context, h *held, name string) error {
	cli, err := h.clientOf(ctx, name)
	if err != nil {
		return nil
	}
	return a.precheck(ctx, cli, name)
}

// precheck makes sure that this user may take name, bounded by
// --command-timeout: the library retries every failed write while it waits,
// permission denied included, so a user whose role does not cover the name
// would otherwise wait forever. etcd checks the permissions of both branches
// of a Txn, so a Put in a branch that never runs proves write access while
// writing nothing.
func (a *app) precheck(ctx context.Context, cli *clientv3.Client, name string) error {
	if err := layout.ValidateName(name, etcdlock.ErrInvalidName); err != nil {
		return exitf(exitUsage, "%s", libErr(err))
	}
	prefix, barriers := layout.NamePrefix(name), layout.BarrierPrefix(name)
	ctx, cancel := context.WithTimeout(ctx, a.conn.commandTimeout)
	defer cancel()
	_, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(prefix), "<", 0)). // never true
		Then(clientv3.OpPut(prefix+"permission-check", ""), clientv3.OpPut(barriers+"permission-check", "")).
		Commit()
	if err != nil {
		msg := errText(err)
		if strings.Contains(msg, "permission denied") {
			msg += fmt.Sprintf(" (the user's role needs readwrite on the prefixes %q and %q)", prefix, barriers)
		}
		return exitf(exitUsage, "cannot use %q: %s", name, strings.TrimPrefix(msg, "etcdserver: "))
	}
	return nil
}
