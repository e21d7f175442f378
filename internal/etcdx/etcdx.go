// Package etcdx holds helpers over the etcd client that package etcdlock,
// package shard and the CLI share: a paged read of a prefix, the test for
// etcd's "lease not found", and a cluster's leader status. Being internal, it is no part of the
// public API.
package etcdx

import (
	"context"
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Page is how many keys one read of ReadPrefix returns at most.
const Page = 1000

// ReadPrefix reads every key under prefix at one revision, in pages of
// Page keys, calling f with each; more are further options of each
// page's read (WithKeysOnly). It returns the revision read at, or the
// read's error.
func ReadPrefix(ctx context.Context, cli *clientv3.Client, prefix string, f func(*mvccpb.KeyValue), more ...clientv3.OpOption) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	var rev int64
	for key := prefix; ; {
		opts := append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(Page)}, more...)
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			f(kv)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// IsLeaseNotFound reports etcd's "requested lease not found", as an error
// value or as its text (a gRPC status that lost its type).
func IsLeaseNotFound(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrLeaseNotFound) ||
		strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error()))
}

// LeaderStatus asks each member of cli's cluster for its status and
// returns the leader's name, applied raft index and revision (zero values
// when no member says it leads: two reads apart give its commits); err is
// the member list's.
func LeaderStatus(ctx context.Context, cli *clientv3.Client) (name string, index uint64, rev int64, err error) {
	members, err := cli.MemberList(ctx)
	if err != nil {
		return "", 0, 0, err
	}
	for _, mem := range members.Members {
		if len(mem.ClientURLs) == 0 {
			continue
		}
		st, err := cli.Status(ctx, mem.ClientURLs[0])
		if err != nil || st.Leader != mem.ID {
			continue
		}
		return mem.Name, st.RaftAppliedIndex, st.Header.Revision, nil
	}
	return "", 0, 0, nil
}
