package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// openShards reads the sharded deployment whose root is cli; each member
// cluster is dialed with this command's TLS and credentials. ok is false
// (and no error) when cli's cluster holds no slot map, or the user may not
// read it: the deployment is one cluster.
func (a *app) openShards(ctx context.Context, cli *clientv3.Client) (r *shard.Shards, ok bool, err error) {
	r, ok, err = a.readShards(ctx, cli)
	if err != nil {
		return nil, false, exitf(exitUsage, "%s", libErr(err))
	}
	return r, ok, nil
}

// readShards is openShards with the library's error.
func (a *app) readShards(ctx context.Context, cli *clientv3.Client) (r *shard.Shards, ok bool, err error) {
	r, err = shard.New(ctx, cli, shard.WithDialer(a.dialMember), shard.WithLogger(a.logger()))
	switch {
	case err == nil:
		return r, true, nil
	case errors.Is(err, etcdlock.ErrInvalidArgument) && strings.Contains(err.Error(), "no slot map"),
		strings.Contains(errText(err), "permission denied"):
		return nil, false, nil
	}
	return nil, false, err
}

// routing returns how run, elect, observe and serve take names: over the
// clusters of the sharded deployment whose root cli reaches (r, which the
// caller closes after the sessions on it), or on cli's cluster alone (a nil
// r: a plain cluster). A member cluster of a deployment that is not its
// root is refused: plain sessions there do not compare a slot's stamp, so a
// move could not freeze them and a name could be held on two clusters.
//
// A failure to read (etcd down, or without a leader) is one that run and
// elect wait out within --wait (see unavailable).
func (a *app) routing(ctx context.Context, cli *clientv3.Client, what string) (*shard.Shards, error) {
	rctx, cancel := context.WithTimeout(ctx, a.conn.commandTimeout)
	defer cancel()
	r, ok, err := a.readShards(rctx, cli)
	switch {
	case err != nil:
		if isTimeout(err) && errors.Is(probe(ctx, cli, cli.Endpoints(), a.conn.dialTimeout), errNoLeader) {
			err = errNoLeader // the read waited for a leader that never came
		}
		return nil, a.conn.unavailable(err, exitf(exitUsage, "cannot open a session: %s", libErr(err)))
	case ok:
		return r, nil
	}
	return nil, a.refuseMember(rctx, cli, what)
}

// refuseMember fails when cli's cluster holds etcdlock-shards/ keys (and,
// as routing found, no slot map): a member of a sharded deployment.
//
// The read is serializable (any member answers, with or without a leader);
// when none can (or the user's role may not read etcdlock-shards/), the
// check is left to what follows, which needs the cluster too and says why
// it cannot have it.
func (a *app) refuseMember(ctx context.Context, cli *clientv3.Client, what string) error {
	resp, err := cli.Get(ctx, "etcdlock-shards/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil || resp.Count == 0 {
		return nil
	}
	return exitf(exitUsage, "the cluster at --endpoints is part of a sharded deployment but is not its root (it holds etcdlock-shards/ keys and no slot map): %s would take names on it alone, while the map may give them to another cluster; give the root cluster's endpoints, and %s routes each name to its cluster (etcdlock status NAME says where a name lives)", what, what)
}

// warnMember says on stderr when cli's cluster is a member of a sharded
// deployment but not its root: a read there (status, ls) sees only the
// names that cluster holds, not where the map puts a name.
func (a *app) warnMember(ctx context.Context, cli *clientv3.Client) {
	if err := a.refuseMember(ctx, cli, "this read"); err != nil {
		fmt.Fprintf(a.stderr, "etcdlock: warning: the cluster at --endpoints is part of a sharded deployment but is not its root: this read sees only the names it holds now; give the root cluster's endpoints to read every cluster\n")
	}
}

// mustShards is openShards for the commands that need a deployment.
func (a *app) mustShards(ctx context.Context, cli *clientv3.Client) (*shard.Shards, error) {
	r, ok, err := a.openShards(ctx, cli)
	if err == nil && !ok {
		err = exitf(exitUsage, "the cluster at --endpoints holds no slot map: it is not the root of a sharded deployment (etcdlock clusters init)")
	}
	return r, err
}

func (a *app) dialMember(ctx context.Context, _ string, eps []string) (*clientv3.Client, error) {
	return a.connectTo(ctx, eps)
}

// withShards runs body with the sharded deployment whose root --endpoints
// reaches (see mustShards), closed after it.
func (a *app) withShards(body func(ctx context.Context, r *shard.Shards) error) error {
	return a.withClient(func(ctx context.Context, cli *clientv3.Client) error {
		r, err := a.mustShards(ctx, cli)
		if err != nil {
			return err
		}
		defer r.Close()
		return body(ctx, r)
	})
}
