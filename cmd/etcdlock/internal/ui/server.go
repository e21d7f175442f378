// Package ui is etcdlock's live status page: every lock, semaphore,
// read-write lock and election under a prefix, with holders, waiters in
// grant order, a timeline of what changed and a chart of the last 15
// minutes, plus a JSON API and a server-sent-events stream of the same.
//
// One Server keeps one view of etcd, built from one paged read and then one
// watch on the prefix, however many pages are open: it never polls a lock.
// (The time left on a lease is asked for the holders and waiters a page
// shows, at most once a second per lease.)
package ui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock/internal/layout"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ErrInvalidConfig is wrapped by New's errors.
var ErrInvalidConfig = errors.New("etcdlock ui: invalid configuration")

// Config says what a Server shows and what it allows. New reads it once.
type Config struct {
	// Prefix: the page shows the names that start with it ("" for all).
	Prefix string
	// AllowBreak adds a Break button to every holder (off: read-only).
	AllowBreak bool
	// Logger gets the server's own warnings; nil for none.
	Logger *zap.Logger
	// Clusters, when set, are the member clusters of the sharded
	// deployment whose root is New's client: the page shows the names of
	// all of them, each with its cluster, and the moves of their slots.
	Clusters []Source
}

// Server serves the status page of one client's cluster, or of the member
// clusters of a sharded deployment (Config.Clusters). Its methods are safe
// for concurrent use; Run must be called once, and the page shows a
// "loading" state until Run has read the prefix of every cluster.
type Server struct {
	// Set by New, read-only after.
	root      *clientv3.Client // New's client: the cluster's, or a deployment's root
	cfg       Config
	keyPrefix string
	log       *zap.Logger
	hub       *hub
	srcs      []*source // the clusters read (sources.go); their views are guarded by mu

	// Guarded by mu; written by Run's goroutines and the break handler.
	mu    sync.Mutex
	tl    timeline
	ch    chart
	dirty bool // the view changed since the last "change" message
}

// New returns a Server for cli and cfg. It fails with an error wrapping
// ErrInvalidConfig for a nil client or a prefix that no name can start
// with; nothing is read until Run.
func New(cli *clientv3.Client, cfg Config) (*Server, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	if strings.ContainsRune(cfg.Prefix, 0) {
		return nil, fmt.Errorf("%w: prefix %q: a name cannot hold a NUL byte", ErrInvalidConfig, cfg.Prefix)
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	srcs, err := newSources(cli, cfg.Clusters)
	if err != nil {
		return nil, err
	}
	return &Server{root: cli, cfg: cfg, keyPrefix: layout.ListPrefix(cfg.Prefix), log: log,
		hub: newHub(), srcs: srcs}, nil
}

// Run keeps the view current until ctx ends, then ends every event stream
// and returns ctx's error. It reads the prefix in pages at one revision,
// watches it from the next revision, and starts over when the watch fails
// (a compaction, a lost member); meanwhile the page shows the failure.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer func() {
		s.hub.close()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.publishLoop(ctx)
	}()
	if s.sharded() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.followMoves(ctx)
		}()
	}
	for _, src := range s.srcs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.follow(ctx, src)
		}()
	}
	s.follow(ctx, s.srcs[0])
	return ctx.Err()
}

// follow keeps src's view current until ctx ends.
func (s *Server) follow(ctx context.Context, src *source) {
	pause := time.Duration(0)
	for {
		if !sleep(ctx, pause) {
			return
		}
		pause = min(max(2*pause, 100*time.Millisecond), 5*time.Second)
		cli, err := s.client(ctx, src)
		if err != nil {
			s.failed(ctx, src, err)
			continue
		}
		// Phase 1: one paged read at one revision.
		v, err := s.load(ctx, cli)
		if err != nil {
			s.failed(ctx, src, err)
			continue
		}
		s.mu.Lock()
		src.v, src.loaded, src.readErr, s.dirty = v, true, nil, true
		s.mu.Unlock()
		pause = 0
		// Phase 2: the watch, from the next revision until it fails.
		s.failed(ctx, src, s.watch(ctx, src, cli, v.rev+1))
	}
}

// failed shows err on the page (unless ctx has ended).
func (s *Server) failed(ctx context.Context, src *source, err error) {
	if ctx.Err() != nil || err == nil {
		return
	}
	s.log.Warn("ui: reading the prefix failed", zap.String("prefix", s.keyPrefix), zap.String("cluster", src.id), zap.Error(err))
	s.mu.Lock()
	src.readErr, s.dirty = err, true
	s.mu.Unlock()
}

// readTimeout bounds each page of a cluster's read (and its dial): a
// cluster that does not answer shows as failed, and the others are shown.
const readTimeout = 10 * time.Second

// load reads every key under the prefix with cli, in pages, at one
// revision.
func (s *Server) load(ctx context.Context, cli *clientv3.Client) (*view, error) {
	v := newView()
	end := clientv3.GetPrefixRangeEnd(s.keyPrefix)
	for key := s.keyPrefix; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if v.rev != 0 {
			opts = append(opts, clientv3.WithRev(v.rev))
		}
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		resp, err := cli.Get(rctx, key, opts...)
		cancel()
		if err != nil {
			return nil, err
		}
		if v.rev == 0 {
			v.rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			v.put(s.cfg.Prefix, kv)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	v.countWaiters()
	return v, nil
}

// watch applies the prefix's events on src (cli its client) from revision
// from until the watch fails or ctx ends.
func (s *Server) watch(ctx context.Context, src *source, cli *clientv3.Client, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range cli.Watch(wctx, s.keyPrefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			return err
		}
		if len(resp.Events) > 0 {
			s.apply(src, resp.Events)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("the watch ended")
}

// apply updates the view with one watch response's events and records what
// they did.
func (s *Server) apply(src *source, evs []*mvccpb.Event) {
	now := time.Now()
	rev := evs[len(evs)-1].Kv.ModRevision
	s.mu.Lock()
	defer s.mu.Unlock()
	why := endsOf(src.v, evs)
	for _, c := range src.v.apply(s.cfg.Prefix, evs, rev) {
		for _, ev := range events(c, rev, now) {
			ev.Cluster = src.id
			switch {
			case ev.Kind == kindGranted:
				s.ch.grant(now, s.nwait())
			case ev.Kind == kindEnded:
				if how := why.of(ev); how != "" {
					classify(&ev, how, false, false)
				}
			}
			s.tl.record(ev)
		}
	}
	s.dirty = true
}

// ends is what one watch response shows of why its deleted keys went.
type ends struct {
	deleted  map[string]int64  // queue key -> the revision it was deleted at
	broken   map[string]bool   // endKey of a grant a break marker names
	barriers map[barrier]int64 // barrier -> the revision it was deleted at; 0: alive at the response's start
}

// endsOf reads evs, before v applies them: deleted keys, break markers,
// and the barriers the deletions' sessions had. The Server's mu is held.
func endsOf(v *view, evs []*mvccpb.Event) ends {
	e := ends{deleted: map[string]int64{}, broken: map[string]bool{}, barriers: map[barrier]int64{}}
	for b := range v.barriers {
		e.barriers[b] = 0
	}
	for _, ev := range evs {
		key, rev := string(ev.Kv.Key), ev.Kv.ModRevision
		name, lease, isBarrier := layout.SessionOfKey(key)
		switch {
		case ev.Type == mvccpb.PUT && isBarrier:
			if _, ok := e.barriers[barrier{name, lease}]; !ok {
				e.barriers[barrier{name, lease}] = 0 // created in this response
			}
		case ev.Type == mvccpb.PUT:
			if b, ok := layout.BrokenOf(ev.Kv); ok {
				e.broken[endKey(b.Name, int64(b.Token))] = true
			}
		case isBarrier:
			e.barriers[barrier{name, lease}] = rev
		default:
			e.deleted[key] = rev
		}
	}
	return e
}

// of tells how ev's key went: broken (a break marker at its deletion),
// expired (its session's barrier went at the same revision: the lease
// ended), released (the barrier lived on past it; classify makes it left
// for a waiter), or "" when the barrier is unknown (a session of an older
// etcdlock): then the lease must be asked about.
func (e ends) of(ev event) string {
	d, ok := e.deleted[ev.key]
	if !ok {
		return ""
	}
	gone, known := e.barriers[barrier{ev.Name, ev.lease}]
	switch {
	case e.broken[endKey(ev.Name, ev.Token)]:
		return wentBroken
	case known && gone == d:
		return wentExpired
	case known:
		return wentReleased
	}
	return ""
}

// endKey identifies a key of a name by its token (unique in the name).
func endKey(name string, token int64) string { return fmt.Sprintf("%d %s", token, name) }

// classifyPending names the deletions seen since the last call: whether
// each key's lease lived on decides released (or left) against expired.
func (s *Server) classifyPending(ctx context.Context) {
	// The events stay pending (new ones queue behind them) until named.
	s.mu.Lock()
	pend := s.tl.unnamed()
	s.mu.Unlock()
	if len(pend) == 0 {
		return
	}
	leases := map[string][]clientv3.LeaseID{} // by cluster
	for _, ev := range pend {
		if ev.Kind == kindEnded {
			leases[ev.Cluster] = append(leases[ev.Cluster], ev.lease)
		}
	}
	type answer struct {
		live  map[clientv3.LeaseID]bool
		known bool
	}
	answers := map[string]answer{}
	for id, ls := range leases {
		live, known := s.ttlsOf(id).alive(ctx, ls)
		answers[id] = answer{live, known}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range pend {
		if pend[i].Kind == kindEnded {
			a := answers[pend[i].Cluster]
			classify(&pend[i], wentUnknown, a.live[pend[i].lease], a.known)
		}
	}
	s.tl.named(pend)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-time.After(d): // collected once it fires or is unreachable (Go 1.23)
		return true
	case <-ctx.Done():
		return false
	}
}
