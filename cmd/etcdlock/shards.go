package main

import (
	"context"
	"errors"
	"strings"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// openShards reads the sharded deployment whose root is cli; each member
// cluster is dialed with this command's TLS and credentials. ok is false
// (and no error) when cli's cluster holds no slot map, or the user may not
// read it: the deployment is one cluster.
func (a *app) openShards(ctx context.Context, cli *clientv3.Client) (r *etcdlock.Shards, ok bool, err error) {
	r, err = etcdlock.NewShards(ctx, cli, etcdlock.WithDialer(a.dialMember), etcdlock.WithShardsLogger(a.logger()))
	switch {
	case err == nil:
		return r, true, nil
	case errors.Is(err, etcdlock.ErrInvalidArgument) && strings.Contains(err.Error(), "no slot map"),
		strings.Contains(errText(err), "permission denied"):
		return nil, false, nil
	}
	return nil, false, exitf(exitUsage, "%s", libErr(err))
}

// refuseSharded fails when cli's cluster is part of a sharded deployment
// (its root, or a member): run, elect, observe and serve take names with
// plain sessions, whose writes do not compare a slot's stamp, so a move
// could not freeze them and a name could be held on two clusters at once.
//
// The read is serializable (any member answers, with or without a leader);
// when none can (or the user's role may not read etcdlock-shards/), the
// check is left to what follows, which needs the cluster too and says why
// it cannot have it.
func (a *app) refuseSharded(ctx context.Context, cli *clientv3.Client, what string) error {
	ctx, cancel := context.WithTimeout(ctx, a.conn.commandTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, "etcdlock-shards/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	switch {
	case err != nil:
		return nil
	case resp.Count > 0:
		return exitf(exitUsage, "the cluster at --endpoints is part of a sharded deployment (it holds etcdlock-shards/ keys): %s takes names on one cluster only and could hold a name that a move gives to another cluster; use the library's NewShardedSession (etcdlock status NAME says where a name lives)", what)
	}
	return nil
}

// mustShards is openShards for the commands that need a deployment.
func (a *app) mustShards(ctx context.Context, cli *clientv3.Client) (*etcdlock.Shards, error) {
	r, ok, err := a.openShards(ctx, cli)
	if err == nil && !ok {
		err = exitf(exitUsage, "the cluster at --endpoints holds no slot map: it is not the root of a sharded deployment (etcdlock clusters init)")
	}
	return r, err
}

func (a *app) dialMember(ctx context.Context, _ string, eps []string) (*clientv3.Client, error) {
	return a.connectTo(ctx, eps)
}
