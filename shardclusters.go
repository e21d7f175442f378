package etcdlock

// This file holds the root's records of the member clusters: add one, check
// that endpoints answer, change a cluster's endpoints, remove one.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// checkBound bounds CheckEndpoints' read.
const checkBound = 5 * time.Second

// AddCluster records a new member cluster on root, with no slots (move
// some to it with MoveSlot). It does not contact the cluster: call
// CheckEndpoints first to know that its endpoints answer.
//
//   - nil: the record is written; Shards see it at their next map read
//     (Shards.Client reads it at once).
//   - ErrInvalidArgument: a bad id, a nil root, no endpoints, or an id
//     recorded already; nothing is written.
//   - otherwise the request's (or ctx's) error: the record may or may not
//     be written (run it again: a second call says it is recorded).
func AddCluster(ctx context.Context, root *clientv3.Client, id string, endpoints []string) error {
	if err := validateClusterID(id); err != nil {
		return newError("add cluster", "", err)
	}
	if root == nil || len(endpoints) == 0 {
		return newError("add cluster", "", fmt.Errorf("%w: nil root client or no endpoints", ErrInvalidArgument))
	}
	rec, _ := json.Marshal(Cluster{Endpoints: endpoints})
	resp, err := root.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(clusterKey(id)), "=", 0)).
		Then(clientv3.OpPut(clusterKey(id), string(rec))).Commit()
	if err != nil {
		return newError("add cluster", "", ctxErr(ctx, err))
	}
	if !resp.Succeeded {
		return newError("add cluster", "", fmt.Errorf("%w: cluster %s is recorded already", ErrInvalidArgument, id))
	}
	return nil
}

// CheckEndpoints dials endpoints with dial (nil: the default, see
// WithDialer; it is given the id ""), reads one key there linearizably (so
// the cluster must have a leader), bounded by 5 s and ctx, and closes the
// client. It writes nothing.
//
//   - nil: the cluster at endpoints answered.
//   - ErrInvalidArgument: no endpoints; or the dial or the read failed
//     ("endpoints ... do not answer", wrapping the cause too).
func CheckEndpoints(ctx context.Context, endpoints []string, dial Dialer) error {
	if len(endpoints) == 0 {
		return newError("check endpoints", "", fmt.Errorf("%w: no endpoints", ErrInvalidArgument))
	}
	if dial == nil {
		dial = dialerWith(zap.NewNop())
	}
	ctx, cancel := context.WithTimeout(ctx, checkBound)
	defer cancel()
	fail := func(err error) error {
		return newError("check endpoints", "", fmt.Errorf("%w: endpoints %s do not answer: %w",
			ErrInvalidArgument, strings.Join(endpoints, ","), ctxErr(ctx, err)))
	}
	cli, err := dial(ctx, "", endpoints)
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	if _, err := cli.Get(ctx, generationKey, clientv3.WithCountOnly()); err != nil {
		return fail(err)
	}
	return nil
}
