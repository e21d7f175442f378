package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/serve"
	"github.com/spf13/cobra"
)

// serveLong is serve's help text.
const serveLong = `Serve etcdlock's locks, semaphores, read-write locks and elections over
HTTP/JSON, for programs in any language. Run one beside a service (one per
host or pod). HTTP holders hold ordinary etcdlock keys: a Go Mutex, an
etcdlock run and an HTTP client of one name wait in one FIFO queue, with one
token sequence.

  POST /v1/hold {"name":N,"wait":"30s","ttl":"10s","identity":ID,"try":false,"kind":"mutex"}
      an NDJSON stream: {"event":"granted","token":...}, then "alive" lines
      with valid_until, and "lost" with its cause if the grant ends. Closing
      the request releases the grant at once (guarded by its token).
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
session_expired, not_found, method_not_allowed, unavailable and
permission_denied. Keys are exact: a key given twice, or in another case
than documented, is invalid_argument.

At the root of a sharded deployment (see 'etcdlock clusters') every session
is a sharded one: each name is taken on the cluster its slot is on, and
/v1/state says where (and whether a move holds it). A member cluster that is
not the root is refused.

It listens on localhost unless told otherwise; --socket serves a unix
socket instead (created with mode 0600: its owner is the access
control; a path that is not a socket, or that a running process answers
on, is refused, and only a stale socket is replaced), and
--auth-token-file requires "Authorization: Bearer <token>" on every
request. On SIGTERM or SIGINT it stops accepting, releases every grant it
holds and exits; if it is killed, its grants free within their TTL.`

func (a *app) serveCmd() *cobra.Command {
	var listen, socket, tokenFile string
	cmd := &cobra.Command{
		Use:   "serve [--listen 127.0.0.1:7070] [--socket PATH] [--auth-token-file F]",
		Short: "Serve the locks over HTTP/JSON for any language",
		Long:  serveLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token := ""
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return usagef(cmd, "--auth-token-file: %v", err)
				}
				if token = strings.TrimSpace(string(b)); token == "" {
					return usagef(cmd, "--auth-token-file %s is empty", tokenFile)
				}
			}
			if socket != "" && !cmd.Flags().Changed("listen") {
				listen = ""
			}
			return a.serve(listen, socket, token)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7070", "TCP address to serve on (with --socket: only if given)")
	cmd.Flags().StringVar(&socket, "socket", "", "serve on this unix socket (created with mode 0600)")
	cmd.Flags().StringVar(&tokenFile, "auth-token-file", "", "require this file's token as a bearer token on every request")
	return cmd
}

// serve runs the server until SIGTERM or SIGINT.
func (a *app) serve(listen, socket, token string) error {
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
	state := func(ctx context.Context, name string) (any, error) { return statusOf(ctx, cli, name) }
	if r != nil {
		defer r.Close() // after the server closed its sessions (runServer)
		state = func(ctx context.Context, name string) (any, error) { return shardedStatus(ctx, r, name) }
		a.logf("the cluster at --endpoints is the root of a sharded deployment of %d clusters: each name is taken on its own", len(r.Clusters()))
	}
	srv, err := serve.New(cli, serve.Config{AuthToken: token, Logger: a.logger(), Identity: serveIdentity(),
		State: state, Shards: r})
	if err != nil {
		return exitf(exitUsage, "%v", err)
	}
	lns, err := serveListeners(listen, socket)
	if err != nil {
		return err
	}
	for _, ln := range lns {
		a.logf("serving the lock API on %s://%s", ln.Addr().Network(), ln.Addr())
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && token == "" {
			a.logf("note: %s is reachable from other machines, and no --auth-token-file is set: anyone who reaches it can take and hold locks", ln.Addr())
		}
	}
	return runServer(srv, lns, sigs)
}

// serveListeners binds --listen and --socket.
func serveListeners(listen, socket string) ([]net.Listener, error) {
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
