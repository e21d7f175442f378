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
