package ui

// This file holds the clusters the page reads: one, or every member of a
// sharded deployment. Each has its own view, kept by its own read and
// watch; the page merges them. A name lives on one cluster at a time (a
// move drains the source before the target grants), so no name has keys
// in two views at once.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock/shard"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Source is one member cluster of a sharded deployment for Config.Clusters:
// its Client, or (nil Client) a Dial that makes it. The page calls Dial
// when it starts and again after each failure, showing the failure
// meanwhile, so a cluster that is down when the page starts shows up once
// it answers.
type Source struct {
	ID     string
	Client *clientv3.Client
	Dial   func(ctx context.Context) (*clientv3.Client, error)
}

// source is the Server's state of one cluster.
type source struct {
	// Set by New, read-only after.
	id   string // "" for the one cluster of a page that is not sharded
	dial func(ctx context.Context) (*clientv3.Client, error)
	ttls *ttlCache

	// Guarded by Server.mu; written by the source's Run loop.
	cli     *clientv3.Client // nil until dialed
	v       *view
	loaded  bool
	readErr error // the last failure to dial, read or watch; nil while all is well
}

func newSources(cli *clientv3.Client, clusters []Source) ([]*source, error) {
	if len(clusters) == 0 {
		return []*source{{cli: cli, ttls: newTTLCache(cli), v: newView()}}, nil
	}
	out := make([]*source, 0, len(clusters))
	for _, c := range clusters {
		if c.ID == "" || c.Client == nil && c.Dial == nil {
			return nil, fmt.Errorf("%w: a cluster without an id, or without a client and a dial", ErrInvalidConfig)
		}
		out = append(out, &source{id: c.ID, cli: c.Client, dial: c.Dial, ttls: newTTLCache(c.Client), v: newView()})
	}
	return out, nil
}

// client returns src's client, dialing it (bounded by readTimeout) if need
// be: at first, and again once the dialed one is closed (a Dial's owner may
// close it, as a Shards does when the cluster's endpoints change).
func (s *Server) client(ctx context.Context, src *source) (*clientv3.Client, error) {
	s.mu.Lock()
	cli := src.cli
	s.mu.Unlock()
	if cli != nil && (src.dial == nil || cli.Ctx().Err() == nil) {
		return cli, nil
	}
	dctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	cli, err := src.dial(dctx)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the cluster: %w", err)
	}
	src.ttls.setClient(cli)
	s.mu.Lock()
	src.cli = cli
	s.mu.Unlock()
	return cli, nil
}

// sharded reports whether the page reads the members of a deployment.
func (s *Server) sharded() bool { return s.srcs[0].id != "" }

// The merged view; s.mu is held by the callers.

// loaded reports whether every cluster was read; on a sharded page, a
// cluster that failed before its first read does not hold the others'
// names back (clusters names it).
func (s *Server) loaded() bool {
	for _, src := range s.srcs {
		if !src.loaded && (src.readErr == nil || !s.sharded()) {
			return false
		}
	}
	return true
}

// readErr is the clusters' failures, each named by its cluster.
func (s *Server) readErr() error {
	var errs []error
	for _, src := range s.srcs {
		switch {
		case src.readErr != nil && src.id != "":
			errs = append(errs, fmt.Errorf("cluster %s: %w", src.id, src.readErr))
		case src.readErr != nil:
			return src.readErr
		}
	}
	return errors.Join(errs...)
}

// clusterJSON is a sharded page's cluster in /api/locks: its failure, if
// it has one now (its names are then missing, or as last seen).
type clusterJSON struct {
	ID    string `json:"id"`
	Error string `json:"error,omitempty"`
}

// clusters is the clusters of a sharded page (nil for one cluster).
func (s *Server) clusters() []clusterJSON {
	if !s.sharded() {
		return nil
	}
	out := make([]clusterJSON, 0, len(s.srcs))
	for _, src := range s.srcs {
		c := clusterJSON{ID: src.id}
		if src.readErr != nil {
			c.Error = errorText(src.readErr, s.keyPrefix)
		}
		out = append(out, c)
	}
	return out
}

// rev is the view's revision: of its one cluster (the highest of several,
// whose revisions are not comparable; the page shows it as a sign of
// life).
func (s *Server) rev() int64 {
	var top int64
	for _, src := range s.srcs {
		top = max(top, src.v.rev)
	}
	return top
}

func (s *Server) nnames() int {
	n := 0
	for _, src := range s.srcs {
		n += len(src.v.names)
	}
	return n
}

func (s *Server) nwait() int {
	n := 0
	for _, src := range s.srcs {
		n += src.v.nwait
	}
	return n
}

// match returns the names that contain filter, in order.
func (s *Server) match(filter string) []string {
	if len(s.srcs) == 1 {
		return s.srcs[0].v.match(filter)
	}
	var out []string
	for _, src := range s.srcs {
		out = append(out, src.v.match(filter)...)
	}
	sort.Strings(out)
	return out
}

// sourceOf returns the cluster whose view has name (the first one when
// none has it: a free name).
func (s *Server) sourceOf(name string) *source {
	for _, src := range s.srcs {
		if _, ok := src.v.names[name]; ok {
			return src
		}
	}
	return s.srcs[0]
}

// state returns name's state, and on a sharded page its cluster and slot.
func (s *Server) state(name string) shard.State {
	src := s.sourceOf(name)
	st := shard.State{LockState: src.v.state(name)}
	if src.id != "" {
		st.Cluster, st.Slot = src.id, shard.SlotOf(name)
		if len(st.Holders) > 0 {
			st.Generation = st.Holders[0].Token.Generation()
		}
	}
	return st
}

// clientOf returns the client of name's cluster now.
func (s *Server) clientOf(name string) *clientv3.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sourceOf(name).cli
}

// ttlsOf returns the lease cache of cluster id.
func (s *Server) ttlsOf(id string) *ttlCache {
	for _, src := range s.srcs {
		if src.id == id {
			return src.ttls
		}
	}
	return s.srcs[0].ttls
}

// followMoves records the moves of the deployment's slots in the timeline:
// a move record created in the root (moving) and deleted (moved, or given
// up), until ctx ends. Only for a sharded page.
func (s *Server) followMoves(ctx context.Context) {
	const movePrefix = "etcdlock-shards/moves/"
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range s.root.Watch(wctx, movePrefix, clientv3.WithPrefix(), clientv3.WithPrevKV()) {
			if resp.Err() != nil {
				break
			}
			s.recordMoves(resp.Events)
		}
		cancel()
		sleep(ctx, time.Second)
	}
}

// recordMoves adds a timeline event for each move record created or deleted.
func (s *Server) recordMoves(evs []*clientv3.Event) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		slot := strings.TrimLeft(strings.TrimPrefix(string(ev.Kv.Key), "etcdlock-shards/moves/"), "0")
		kv, kind, verb := ev.Kv, kindMoving, "moving"
		if ev.Type == mvccpb.DELETE {
			kv, kind, verb = ev.PrevKv, kindMoved, "moved"
		}
		rec := moveText(kv)
		s.tl.record(event{At: now, Kind: kind, Name: "slot " + dflt(slot, "0"), Detail: verb + " " + rec, Revision: ev.Kv.ModRevision})
	}
	s.dirty = true
}

// moveText is "from A to B" of a move record ("" when unreadable).
func moveText(kv *mvccpb.KeyValue) string {
	var rec struct{ From, To string }
	if kv == nil || json.Unmarshal(kv.Value, &rec) != nil || rec.From == "" || rec.To == "" {
		return ""
	}
	return "from " + rec.From + " to " + rec.To
}

func dflt(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
