package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/wire"
)

// Shards is a client's view of a sharded deployment: the slot map and the
// clusters, read from the root cluster at New and followed by a watch
// until Close. Sessions made with NewSession route each name to the
// cluster that owns its slot. The map changes only by MoveSlot, never
// because a cluster is down: a cluster that is down makes its names
// unavailable, as a lost quorum does with one cluster. When the root's
// record of a cluster changes its endpoints (SetEndpoints), the
// watch moves the client dialed to the old ones to the new ones (its
// sessions live on when they are the same cluster's); when the record goes
// (RemoveCluster), it closes the client and the sessions on it end. A
// Shards is safe for concurrent use.
type Shards struct {
	// Set by New, then read-only.
	root *clientv3.Client
	dial Dialer
	log  *zap.Logger
	stop context.CancelFunc
	wg   sync.WaitGroup // the map watch
	bad  error          // an invalid option, reported by New or Create

	mu       sync.Mutex // guards the fields below
	m        *layout.SlotMap
	clusters map[string]Cluster
	moves    map[int]layout.MoveRecord   // the moves in progress, by slot
	changed  chan struct{}               // closed (and replaced) when m, clusters or moves change
	clients  map[string]*clientv3.Client // dialed so far
	dialed   map[string][]string         // the endpoints each of clients was dialed with
	sessions map[*Session]struct{}       // the open Sessions routed through it
	closed   bool
}

// New reads the slot map and the clusters from root and follows them
// until Close. root stays the caller's (Close does not close it). It
// returns an error wrapping etcdlock.ErrInvalidArgument for a nil client
// or option, or when root holds no slot map (Create makes one), and the
// read's error otherwise.
func New(ctx context.Context, root *clientv3.Client, opts ...Option) (*Shards, error) {
	r, err := withOptions("new shards", root, opts)
	if err != nil {
		return nil, err
	}
	rev, err := r.load(ctx)
	if err != nil {
		return nil, newError("new shards", "", err)
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.follow(wctx, rev)
	}()
	return r, nil
}

// load reads the map, the clusters and the moves at one revision and
// installs them.
func (r *Shards) load(ctx context.Context) (int64, error) {
	resp, err := r.root.Txn(ctx).Then(clientv3.OpGet(layout.MapKey), clientv3.OpGet(layout.ClusterKeyPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(layout.MoveKeyPrefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return 0, fmt.Errorf("read the slot map: %w", ctxErr(ctx, err))
	}
	mkvs := resp.Responses[0].GetResponseRange().Kvs
	if len(mkvs) == 0 {
		return 0, fmt.Errorf("%w: the root cluster holds no slot map (shard.Create, or etcdlock clusters init)", etcdlock.ErrInvalidArgument)
	}
	m, err := layout.DecodeMap(mkvs[0], etcdlock.ErrInvalidArgument)
	if err != nil {
		return 0, err
	}
	clusters := map[string]Cluster{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var c Cluster
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return 0, fmt.Errorf("%w: cluster record %s: %v", etcdlock.ErrInvalidArgument, kv.Key, err)
		}
		c.ID = strings.TrimPrefix(string(kv.Key), layout.ClusterKeyPrefix)
		clusters[c.ID] = c
	}
	moves := map[int]layout.MoveRecord{}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		if slot, rec, ok := layout.DecodeMove(kv); ok {
			moves[slot] = rec
		}
	}
	r.mu.Lock()
	stale := r.dropStale(clusters)
	r.m, r.clusters, r.moves = m, clusters, moves
	if r.changed != nil {
		close(r.changed)
	}
	r.changed = make(chan struct{})
	r.mu.Unlock()
	for _, cli := range stale {
		_ = cli.Close() // its cluster was removed: its sessions end
	}
	return resp.Header.Revision, nil
}

// dropStale moves the client of each cluster whose record names other
// endpoints than it was dialed with (SetEndpoints) to the new ones,
// and removes from r.clients the client of each cluster whose record is
// gone (RemoveCluster), returning those for the caller to close outside
// r.mu. (A client of a record this read does not show yet, dialed by Client
// from the root's record, stays.) r.mu is held.
func (r *Shards) dropStale(clusters map[string]Cluster) []*clientv3.Client {
	var stale []*clientv3.Client
	for id, cli := range r.clients {
		c, ok := clusters[id]
		_, known := r.clusters[id]
		switch {
		case ok && !slices.Equal(c.Endpoints, r.dialed[id]):
			// The same client, on the new endpoints: its sessions live on
			// if the cluster is the same one (its leases are there).
			cli.SetEndpoints(c.Endpoints...)
			r.dialed[id] = c.Endpoints
		case !ok && known:
			stale = append(stale, cli)
			delete(r.clients, id)
			delete(r.dialed, id)
		}
	}
	return stale
}

// follow re-reads the map whenever a key of the root's map, cluster
// records or move records changes, until ctx ends. A watch that fails is
// re-opened after the last revision seen; one whose revision was compacted
// away re-reads everything first (what changed meanwhile is then in the
// read), so no compaction stops it for good.
func (r *Shards) follow(ctx context.Context, rev int64) {
	b := wire.NewBackoff(watchFloor, watchCeil)
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := r.root.Watch(wctx, layout.Root, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				r.log.Warn("shards: the slot map's watch fell behind a compaction; reading it afresh",
					zap.Int64("from", rev+1), zap.Int64("compacted", resp.CompactRevision))
				if nrev, err := r.load(ctx); err == nil {
					rev = nrev
				} else {
					r.log.Warn("shards: cannot re-read the slot map", zap.Error(err))
				}
				break
			}
			if resp.Err() != nil {
				r.log.Debug("shards: the slot map's watch failed; opening it again", zap.Error(resp.Err()))
				break
			}
			if !touchesMap(resp.Events) {
				rev = resp.Header.Revision
				continue
			}
			nrev, err := r.load(ctx)
			if err != nil {
				r.log.Warn("shards: cannot re-read the slot map", zap.Error(err))
				break
			}
			rev = nrev
			b.Reset()
		}
		cancel()
		b.Wait(ctx)
	}
}

func touchesMap(evs []*clientv3.Event) bool {
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		if k == layout.MapKey || strings.HasPrefix(k, layout.ClusterKeyPrefix) || strings.HasPrefix(k, layout.MoveKeyPrefix) {
			return true
		}
	}
	return false
}

// snapshot returns the current map and a channel closed when it changes.
func (r *Shards) snapshot() (*layout.SlotMap, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m, r.changed
}

// ClusterOf returns the id of the cluster that owns name's slot now.
func (r *Shards) ClusterOf(name string) (string, error) {
	if err := layout.ValidateName(name, etcdlock.ErrInvalidName); err != nil {
		return "", newError("route", "", err)
	}
	m, _ := r.snapshot()
	return m.Owner[SlotOf(name)], nil
}

// Clusters returns the member clusters as the root records them, by id.
func (r *Shards) Clusters() []Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Cluster, 0, len(r.clusters))
	for _, c := range r.clusters {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Slots returns the slots the map gives cluster id now.
func (r *Shards) Slots(id string) []int {
	m, _ := r.snapshot()
	return m.SlotsOf(id)
}

// Client returns the client of member cluster id, dialing it on first use
// (and again after the root's record of it changes its endpoints: the map
// watch then closes the old client). It is how a program reads or
// watches one member cluster itself, as etcdlock ui does (with
// etcdlock.StateOf), over the connection the Shards keeps in step with
// the root's record.
// It returns an error wrapping ErrInvalidArgument for an unknown id, or
// ErrSessionClosed after Close.
func (r *Shards) Client(ctx context.Context, id string) (*clientv3.Client, error) {
	for {
		cli, again, err := r.client(ctx, id)
		if !again {
			return cli, err
		}
	}
}

// client is one attempt of Client; again means the record changed its
// endpoints while they were dialed (the client dialed is closed).
func (r *Shards) client(ctx context.Context, id string) (_ *clientv3.Client, again bool, err error) {
	r.mu.Lock()
	cli, ok := r.clients[id]
	c, known := r.clusters[id]
	closed := r.closed
	r.mu.Unlock()
	switch {
	case closed:
		return nil, false, etcdlock.ErrSessionClosed
	case ok:
		return cli, false, nil
	case !known:
		// Recorded after the map watch's last news (AddCluster a moment
		// ago, in this process or another): the root's record decides.
		if c, err = r.readCluster(ctx, id); err != nil {
			return nil, false, err
		}
	}
	// Dialed without the lock: a cluster that is down must not hold up the
	// routing of names on the others.
	cli, err = r.dial(ctx, id, c.Endpoints)
	if err != nil {
		return nil, false, fmt.Errorf("dial cluster %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		_ = cli.Close()
		return nil, false, etcdlock.ErrSessionClosed
	}
	if other, ok := r.clients[id]; ok { // dialed meanwhile by another call
		_ = cli.Close()
		return other, false, nil
	}
	if cur, ok := r.clusters[id]; ok && !slices.Equal(cur.Endpoints, c.Endpoints) {
		_ = cli.Close() // the record changed while it was dialed
		return nil, true, nil
	}
	r.clients[id], r.dialed[id] = cli, c.Endpoints
	return cli, false, nil
}

// readCluster reads cluster id's record from the root. It returns an error
// wrapping ErrInvalidArgument when there is none.
func (r *Shards) readCluster(ctx context.Context, id string) (Cluster, error) {
	resp, err := r.root.Get(ctx, layout.ClusterKey(id))
	if err != nil {
		return Cluster{}, ctxErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return Cluster{}, fmt.Errorf("%w: unknown cluster %q", etcdlock.ErrInvalidArgument, id)
	}
	var c Cluster
	if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
		return Cluster{}, fmt.Errorf("%w: cluster record %s: %v", etcdlock.ErrInvalidArgument, id, err)
	}
	c.ID = id
	return c, nil
}

// MoveInfo is a move in progress as the root records it.
type MoveInfo struct {
	Slot     int
	From, To string
	Started  time.Time // by the mover's clock
	Owner    string    // who started it
	// Epoch is the root revision at which the move was recorded: it names
	// the move in every stamp it writes.
	Epoch int64
}

// moveInfo is the root's record of the move of slot as a MoveInfo.
func moveInfo(slot int, r layout.MoveRecord) MoveInfo {
	return MoveInfo{Slot: slot, From: r.From, To: r.To, Started: time.UnixMilli(r.At), Owner: r.Owner, Epoch: r.Epoch}
}

// Moving returns the move of slot in progress, as the map watch last saw
// it; ok is false when none is.
func (r *Shards) Moving(slot int) (mi MoveInfo, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.moves[slot]
	if !ok {
		return MoveInfo{}, false
	}
	return moveInfo(slot, rec), true
}

// Moves returns every move in progress, by slot, as the map watch last saw
// them.
func (r *Shards) Moves() []MoveInfo {
	r.mu.Lock()
	out := make([]MoveInfo, 0, len(r.moves))
	for slot, rec := range r.moves {
		out = append(out, moveInfo(slot, rec))
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out
}

// Close closes the Sessions routed through r that are still open (their
// grants are released and their leases revoked while the member clients
// still work), stops following the map and closes the member clients it
// dialed. It returns the errors of those closes joined.
func (r *Shards) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	clients, sessions := r.clients, r.sessions
	r.sessions = nil
	r.mu.Unlock()
	errs := make([]error, 0, len(sessions)+len(clients))
	errs = append(errs, closeAll(sessions)...)
	r.stop()
	r.wg.Wait()
	for _, cli := range clients {
		errs = append(errs, cli.Close())
	}
	return errors.Join(errs...)
}

// closeAll closes the sessions all at once and returns their errors.
func closeAll(sessions map[*Session]struct{}) []error {
	errs := make(chan error, len(sessions))
	for s := range sessions {
		go func() { errs <- s.s.Close() }()
	}
	out := make([]error, 0, len(sessions))
	for range sessions {
		out = append(out, <-errs)
	}
	return out
}
