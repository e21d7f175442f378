package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/serve"
	"github.com/etcdlock/etcdlock/shard"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// serveLong is serve's help text.
const serveLong = `Serve etcdlock's locks, semaphores, read-write locks and elections over
HTTP/JSON, for programs in any language. Run one beside a service (one per
host or pod). HTTP holders hold ordinary etcdlock keys: a Go Mutex, an
etcdlock run and an HTTP client of one name wait in one FIFO queue, with one
token sequence.

  POST /v1/hold {"name":N,"wait":"30s","ttl":"10s","identity":ID,"try":false,"kind":"mutex"}
      an NDJSON stream: {"event":"granted","token":...,"hold":H}, then
      "alive" lines with valid_until, and "lost" with its cause if the grant
      ends. Closing the request releases the grant at once (guarded by its
      token); so does DELETE /v1/holds/H, which answers once the release has
      committed (the stream then says "released" and ends).
  POST /v1/sessions {"ttl":"10s","identity":ID}, POST /v1/sessions/S/keepalive
      (within the TTL, else the session is closed and its locks freed),
      POST /v1/sessions/S/lock {"name":N,...}, POST /v1/sessions/S/unlock
      {"name":N,"token":T}, DELETE /v1/sessions/S
  POST /v1/campaign {"name":N,"value":V}, GET /v1/leader?name=N,
      GET /v1/observe?name=N (server-sent events), GET /v1/state?name=N
  GET /metrics

kind is "mutex" (default), "semaphore" (with "n"), "read" or "write".
Errors are {"error":..., "code":...} with codes invalid_name,
invalid_argument, kind_mismatch, locked, timeout, not_held,
session_expired, not_found, method_not_allowed, unavailable,
permission_denied, unauthenticated, forbidden_origin and too_many (429,
with Retry-After, past a --max-* bound). Keys are exact:
a key given twice, or in another case than documented, is
invalid_argument. A body must be Content-Type: application/json.

What a web page could send is refused (forbidden_origin): an Origin header not
given with --allow-origin, and over TCP a Host that does not name the
server (its address, localhost on loopback, the host name otherwise, or a
name given with --allow-host).

At the root of a sharded deployment (see 'etcdlock clusters') every session
is a sharded one: each name is taken on the cluster its slot is on, and
/v1/state says where (and whether a move holds it). A member cluster that is
not the root is refused.

With --client-auth etcd, every request names an etcd user with HTTP Basic
credentials, and acts through that user's own client: etcd's RBAC decides
what each caller may do, and serve's own user does nothing a caller asks
(401 unauthenticated without valid credentials). It needs etcd's auth on,
and, on an address other machines reach, HTTPS (--cert-file, --key-file;
--client-ca-file asks for client certificates too).

It listens on localhost unless told otherwise; --socket serves a unix
socket instead (created with mode 0600: its owner is the access
control; a path that is not a socket, or that a running process answers
on, is refused, and only a stale socket is replaced), and
--auth-token-file requires "Authorization: Bearer <token>" on every
request. On SIGTERM or SIGINT it stops accepting, releases every grant it
holds and exits; if it is killed, its grants free within their TTL.`

func (a *app) serveCmd() *cobra.Command {
	var listen, socket, tokenFile string
	var cfg serve.Config
	var auth serveAuth
	cmd := &cobra.Command{
		Use:   "serve [--listen 127.0.0.1:7070] [--socket PATH] [--auth-token-file F]",
		Short: "Serve the locks over HTTP/JSON for any language",
		Long:  serveLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, n := range map[string]int{"max-client-sessions": cfg.MaxClientSessions, "max-client-streams": cfg.MaxClientStreams,
				"max-sessions": cfg.MaxSessions, "max-streams": cfg.MaxStreams} {
				if n < 1 {
					return usagef(cmd, "--%s %d: want at least 1", flag, n)
				}
			}
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return usagef(cmd, "--auth-token-file: %v", err)
				}
				if cfg.AuthToken = strings.TrimSpace(string(b)); cfg.AuthToken == "" {
					return usagef(cmd, "--auth-token-file %s is empty", tokenFile)
				}
			}
			if err := auth.check(cmd, tokenFile != ""); err != nil {
				return err
			}
			if socket != "" && !cmd.Flags().Changed("listen") {
				listen = ""
			}
			return a.serve(listen, socket, cfg, auth)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7070", "TCP address to serve on (with --socket: only if given)")
	cmd.Flags().StringVar(&socket, "socket", "", "serve on this unix socket (created with mode 0600)")
	cmd.Flags().StringVar(&tokenFile, "auth-token-file", "", "require this file's token as a bearer token on every request")
	cmd.Flags().StringSliceVar(&cfg.AllowOrigins, "allow-origin", nil, "accept requests with this Origin header (exactly, e.g. https://ops.example.com); others are refused")
	cmd.Flags().StringSliceVar(&cfg.AllowHosts, "allow-host", nil, "accept this Host name over TCP besides the server's own")
	cmd.Flags().IntVar(&cfg.MaxClientSessions, "max-client-sessions", 100, "sessions one client (remote address) may have open")
	cmd.Flags().IntVar(&cfg.MaxClientStreams, "max-client-streams", 1000, "holds, campaigns, observes and session lock requests one client may have open")
	cmd.Flags().IntVar(&cfg.MaxSessions, "max-sessions", 1000, "sessions all clients may have open")
	cmd.Flags().IntVar(&cfg.MaxStreams, "max-streams", 10000, "holds, campaigns, observes and session lock requests all clients may have open")
	auth.flags(cmd)
	return cmd
}

// serve runs the server until SIGTERM or SIGINT; cfg holds what the flags
// set (the bearer token, the origins and hosts allowed, the bounds), auth
// the callers' identities and TLS.
func (a *app) serve(listen, socket string, cfg serve.Config, auth serveAuth) error {
	sigs, stopSigs := notifySignals()
	defer stopSigs()
	cli, err := a.connect(context.Background())
	if err != nil {
		return err
	}
	defer cli.Close()
	r, err := a.routing(context.Background(), cli, "serve")
	if err != nil {
		return err
	}
	if r != nil {
		defer r.Close() // after the server closed its sessions (runServer)
	}
	if err := a.serveConfig(&cfg, cli, r, auth); err != nil {
		return err
	}
	srv, err := serve.New(cli, cfg)
	if err != nil {
		return exitf(exitUsage, "%v", err)
	}
	lns, err := a.serveListeners(listen, socket, auth)
	if err != nil {
		return err
	}
	for _, ln := range lns {
		a.logf("serving the lock API on %s://%s", ln.Addr().Network(), ln.Addr())
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && cfg.AuthToken == "" && cfg.ClientAuth == nil {
			a.logf("note: %s is reachable from other machines, and no --auth-token-file is set: anyone who reaches it can take and hold locks", ln.Addr())
		}
	}
	return runServer(srv, lns, sigs)
}

// serveConfig completes cfg: the logger, the shared sessions' identity,
// the state reads (of a sharded deployment when r is its routing), and the
// callers' clients with --client-auth etcd.
func (a *app) serveConfig(cfg *serve.Config, cli *clientv3.Client, r *shard.Shards, auth serveAuth) error {
	cfg.Logger, cfg.Identity, cfg.Shards = a.logger(), serveIdentity(), r
	cfg.State = func(ctx context.Context, cli *clientv3.Client, name string) (any, error) {
		return statusOf(ctx, cli, name)
	}
	if r != nil {
		if auth.clientAuth != "" {
			return exitf(exitUsage, "--client-auth etcd: not at the root of a sharded deployment (each member cluster has its own users)")
		}
		cfg.State = func(ctx context.Context, _ *clientv3.Client, name string) (any, error) {
			return shardedStatus(ctx, r, name)
		}
		a.logf("the cluster at --endpoints is the root of a sharded deployment of %d clusters: each name is taken on its own", len(r.Clusters()))
	}
	if auth.clientAuth == "" {
		return nil
	}
	var err error
	cfg.ClientAuth, err = a.dialer(context.Background(), cli)
	return err
}

// serveListeners binds --listen and --socket, with TLS on TCP when auth
// asks for it.
func (a *app) serveListeners(listen, socket string, auth serveAuth) ([]net.Listener, error) {
	plain, err := bindListeners(listen, socket)
	if err != nil {
		return nil, err
	}
	lns, err := auth.secure(plain)
	if err != nil {
		for _, ln := range plain {
			ln.Close()
		}
		return nil, err
	}
	return lns, nil
}

// bindListeners binds --listen and --socket.
func bindListeners(listen, socket string) ([]net.Listener, error) {
	var lns []net.Listener
	if socket != "" {
		ln, err := listenSocket(socket)
		if err != nil {
			return nil, exitf(exitUsage, "--socket: %v", err)
		}
		lns = append(lns, ln)
	}
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, exitf(exitUsage, "--listen: %v", err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// runServer serves until a signal comes (or the server fails).
func runServer(srv *serve.Server, lns []net.Listener, sigs <-chan os.Signal) error {
	if err := untilSignal(sigs, func(ctx context.Context) error { return srv.Serve(ctx, lns...) }); err != nil {
		return exitf(exitUsage, "serve: %v", err)
	}
	return nil
}

// serveIdentity is the identity of the server's shared sessions.
func serveIdentity() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("etcdlock-serve@%s/%d", host, os.Getpid())
}
