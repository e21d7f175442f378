package shard

// This file holds the root's records of the member clusters: add one, check
// that endpoints answer, change a cluster's endpoints, remove one.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// checkBound bounds CheckEndpoints' read.
const checkBound = 5 * time.Second

// Cluster is one member cluster of a sharded deployment, as the root
// records it.
type Cluster struct {
	ID        string   `json:"-"`
	Endpoints []string `json:"endpoints"`
	// Generation is the highest generation ever given to the cluster
	// (RaiseGeneration records it here before the cluster's own key).
	Generation int64 `json:"generation"`
}

// validateClusterID accepts 1-64 bytes of [A-Za-z0-9._-].
func validateClusterID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("%w: cluster id %q must have 1 to 64 bytes", etcdlock.ErrInvalidArgument, id)
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-", c) >= 0) {
			return fmt.Errorf("%w: cluster id %q: only letters, digits, '.', '_' and '-'", etcdlock.ErrInvalidArgument, id)
		}
	}
	return nil
}

// AddCluster records a new member cluster on the root, with no slots (move
// some to it with MoveSlot). It does not contact the cluster: call
// CheckEndpoints first to know that its endpoints answer.
//
//   - nil: the record is written; every Shards sees it at its next map
//     read (Client reads it at once).
//   - ErrInvalidArgument: a bad id, no endpoints, or an id
//     recorded already; nothing is written.
//   - otherwise the request's (or ctx's) error: the record may or may not
//     be written (run it again: a second call says it is recorded).
func (r *Shards) AddCluster(ctx context.Context, id string, endpoints []string) error {
	if err := validateClusterID(id); err != nil {
		return newError("add cluster", "", err)
	}
	if len(endpoints) == 0 {
		return newError("add cluster", "", fmt.Errorf("%w: no endpoints", etcdlock.ErrInvalidArgument))
	}
	root := r.root
	rec, _ := json.Marshal(Cluster{Endpoints: endpoints})
	resp, err := root.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(layout.ClusterKey(id)), "=", 0)).
		Then(clientv3.OpPut(layout.ClusterKey(id), string(rec))).Commit()
	if err != nil {
		return newError("add cluster", "", ctxErr(ctx, err))
	}
	if !resp.Succeeded {
		return newError("add cluster", "", fmt.Errorf("%w: cluster %s is recorded already", etcdlock.ErrInvalidArgument, id))
	}
	return nil
}

// CheckEndpoints dials endpoints with the Dialer of r (see WithDialer; it
// is given the id ""), reads one key there linearizably (so
// the cluster must have a leader), bounded by 5 s and ctx, and closes the
// client. It writes nothing.
//
//   - nil: the cluster at endpoints answered.
//   - ErrInvalidArgument: no endpoints.
//   - ErrUnavailable: the dial or the read failed ("endpoints ... do not
//     answer", wrapping the cause too).
func (r *Shards) CheckEndpoints(ctx context.Context, endpoints []string) error {
	if len(endpoints) == 0 {
		return newError("check endpoints", "", fmt.Errorf("%w: no endpoints", etcdlock.ErrInvalidArgument))
	}
	dial := r.dial
	ctx, cancel := context.WithTimeout(ctx, checkBound)
	defer cancel()
	fail := func(err error) error {
		return newError("check endpoints", "", fmt.Errorf("%w: endpoints %s do not answer: %w",
			ErrUnavailable, strings.Join(endpoints, ","), ctxErr(ctx, err)))
	}
	cli, err := dial(ctx, "", endpoints)
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	if _, err := cli.Get(ctx, layout.GenerationKey, clientv3.WithCountOnly()); err != nil {
		return fail(err)
	}
	return nil
}

// SetEndpoints replaces the endpoints the root records for member
// cluster id, keeping the rest of its record (its generation). It does not
// contact the cluster (see CheckEndpoints). A Shards that sees the change
// moves the client it had dialed to the new endpoints: when they are the
// same cluster's, its sessions there live on; when they are another
// cluster's (a mistake), those sessions find no lease there and are lost,
// as in an outage.
//
//   - nil: the record holds endpoints.
//   - ErrInvalidArgument: a bad or unknown id, no endpoints, or an
//     unreadable record; nothing is written.
//   - otherwise the request's (or ctx's) error: the record may or may not
//     have changed (run it again: it is repeatable).
func (r *Shards) SetEndpoints(ctx context.Context, id string, endpoints []string) error {
	if err := validateClusterID(id); err != nil {
		return newError("set cluster endpoints", "", err)
	}
	if len(endpoints) == 0 {
		return newError("set cluster endpoints", "", fmt.Errorf("%w: no endpoints", etcdlock.ErrInvalidArgument))
	}
	root := r.root
	for {
		resp, err := root.Get(ctx, layout.ClusterKey(id))
		if err != nil {
			return newError("set cluster endpoints", "", ctxErr(ctx, err))
		}
		if len(resp.Kvs) == 0 {
			return newError("set cluster endpoints", "", fmt.Errorf("%w: unknown cluster %q", etcdlock.ErrInvalidArgument, id))
		}
		var c Cluster
		if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
			return newError("set cluster endpoints", "", fmt.Errorf("%w: cluster record %s: %v", etcdlock.ErrInvalidArgument, id, err))
		}
		c.Endpoints = endpoints
		b, _ := json.Marshal(c)
		// Against the record read: a generation raised meanwhile is kept.
		tr, err := root.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(layout.ClusterKey(id)), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(layout.ClusterKey(id), string(b))).Commit()
		if err != nil {
			return newError("set cluster endpoints", "", ctxErr(ctx, err))
		}
		if tr.Succeeded {
			return nil
		}
	}
}

// RemoveCluster deletes the root's record of member cluster id, once the
// map gives it no slot and no move record names it (move its slots away
// first, and finish or abort its moves). It reads the map, the record and
// the move records at one revision and deletes the record in one Txn that
// compares the map's and the record's mod revisions and that every move
// record is older than that read: a move that begins meanwhile (it writes
// a move record) makes the delete fail, and the check runs again. The
// cluster itself is not touched (its data, generation key and stamps stay),
// and every Shards closes its client of it.
//
//   - nil: the record is gone.
//   - ErrInvalidArgument: a bad or unknown id, no slot map;
//     the map gives the cluster slots (the error says how many); or a move
//     record names it (the error says which slot). Nothing is deleted.
//   - otherwise the request's (or ctx's) error: the record may or may not
//     be gone (run it again: an unknown id then says it is).
//
// The removed cluster's generation no longer counts toward new
// generations; every slot that was on it moved to a cluster whose
// generation was raised above it, so no token goes back.
func (r *Shards) RemoveCluster(ctx context.Context, id string) error {
	if err := validateClusterID(id); err != nil {
		return newError("remove cluster", "", err)
	}
	for {
		done, err := removeOnce(ctx, r.root, id)
		if err != nil {
			return newError("remove cluster", "", err)
		}
		if done {
			return nil
		}
	}
}

// removeOnce is one check and guarded delete of RemoveCluster; done is
// false when the guard failed (something changed: check again).
func removeOnce(ctx context.Context, root *clientv3.Client, id string) (done bool, err error) {
	resp, err := root.Txn(ctx).Then(clientv3.OpGet(layout.MapKey), clientv3.OpGet(layout.ClusterKey(id)),
		clientv3.OpGet(layout.MoveKeyPrefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return false, ctxErr(ctx, err)
	}
	mkvs, ckvs := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	switch {
	case len(mkvs) == 0:
		return false, fmt.Errorf("%w: the root holds no slot map", etcdlock.ErrInvalidArgument)
	case len(ckvs) == 0:
		return false, fmt.Errorf("%w: unknown cluster %q", etcdlock.ErrInvalidArgument, id)
	}
	m, err := layout.DecodeMap(mkvs[0], etcdlock.ErrInvalidArgument)
	if err != nil {
		return false, err
	}
	if n := len(m.SlotsOf(id)); n > 0 {
		return false, fmt.Errorf("%w: the map gives cluster %s %d slots: move them to other clusters first", etcdlock.ErrInvalidArgument, id, n)
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		if slot, rec, ok := layout.DecodeMove(kv); ok && (rec.From == id || rec.To == id) {
			return false, fmt.Errorf("%w: cluster %s is named by the move of slot %d %s: finish or abort it first", etcdlock.ErrInvalidArgument, id, slot, rec)
		}
	}
	// A compare over a prefix holds for every key in it (and for none):
	// no move record was written after the read.
	tr, err := root.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(layout.MapKey), "=", m.Rev),
		clientv3.Compare(clientv3.ModRevision(layout.ClusterKey(id)), "=", ckvs[0].ModRevision),
		clientv3.Compare(clientv3.ModRevision(layout.MoveKeyPrefix), "<", resp.Header.Revision+1).WithPrefix()).
		Then(clientv3.OpDelete(layout.ClusterKey(id))).Commit()
	if err != nil {
		return false, ctxErr(ctx, err)
	}
	return tr.Succeeded, nil
}
