package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/ui"
	"github.com/etcdlock/etcdlock/shard"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func (a *app) uiCmd() *cobra.Command {
	var (
		listen     string
		prefix     string
		allowBreak bool
	)
	cmd := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:8080] [--prefix P] [--allow-break]",
		Short: "Serve a live status page of every lock under a prefix",
		Long: `Serve a page that shows every lock, semaphore, read-write lock and election
whose name starts with --prefix (all by default): holders with their token,
identity, lease and time left, waiters in grant order, an election's leader
and candidates, a timeline of grants, releases and expiries, and a chart of
the last 15 minutes. It is driven by one watch of etcd, however many pages
are open, and also serves the same data as JSON (/api/locks, in the shapes of
status -o json) and as server-sent events (/api/stream).

At the root of a sharded deployment the page shows the names of every member
cluster, each with its cluster, and the moves of their slots; a member
cluster that does not answer is named on the page (and retried) while the
others are shown.

The page is read-only and listens on localhost unless told otherwise.
--allow-break adds a Break button to every holder: it asks for
confirmation, then deletes exactly that grant (guarded by its token, as
etcdlock break does). It runs until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkPrefix(cmd, "--prefix", prefix); err != nil {
				return err
			}
			return a.serveUI(listen, prefix, allowBreak)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve the page on")
	cmd.Flags().StringVar(&prefix, "prefix", "", "show the names that start with this prefix")
	cmd.Flags().BoolVar(&allowBreak, "allow-break", false, "add a Break button to every holder")
	return cmd
}

// serveUI serves the status page until a signal comes.
func (a *app) serveUI(listen, prefix string, allowBreak bool) error {
	sigs, stopSigs := notifySignals()
	defer stopSigs()
	cli, err := a.connect(context.Background())
	if err != nil {
		return err
	}
	defer cli.Close()
	cfg := ui.Config{Prefix: prefix, AllowBreak: allowBreak}
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.commandTimeout)
	r, sharded, err := a.openShards(ctx, cli)
	cancel()
	if err != nil {
		return err
	}
	if sharded {
		defer r.Close()
		cfg.Clusters = memberSources(r)
	}
	srv, err := ui.New(cli, cfg)
	if err != nil {
		return exitf(exitUsage, "%v", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return exitf(exitUsage, "--listen: %v", err)
	}
	mode := "read-only"
	if allowBreak {
		mode = "break allowed"
	}
	names := "all names"
	if prefix != "" {
		names = fmt.Sprintf("the names under %q", prefix)
	}
	a.logf("serving the status page of %s on http://%s/ (%s); Ctrl-C ends it", names, ln.Addr(), mode)
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		a.logf("note: %s is reachable from other machines: anyone who can reach it sees %s with their holders' identities, with no login", ln.Addr(), names)
	}
	return runUI(srv, ln, sigs)
}

// memberSources is every member cluster of r, for a sharded page, each
// dialed by the page (again, until it answers: a cluster that is down
// shows as such, and the others are shown).
func memberSources(r *shard.Shards) []ui.Source {
	var out []ui.Source
	for _, c := range r.Clusters() {
		out = append(out, ui.Source{ID: c.ID, Dial: func(ctx context.Context) (*clientv3.Client, error) {
			return r.Client(ctx, c.ID)
		}})
	}
	return out
}

// runUI serves the page until a signal comes (or the server fails).
func runUI(srv *ui.Server, ln net.Listener, sigs <-chan os.Signal) error {
	if err := untilSignal(sigs, func(ctx context.Context) error { return srv.Serve(ctx, ln) }); err != nil {
		return exitf(exitUsage, "status page: %v", err)
	}
	return nil
}
