//go:build linux

package safety

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// recorder keeps every event under a key prefix from the revision it
// started at: etcd's own record of the lock's queue (and of the guarded
// counter). A watch that breaks is resumed from the last event's revision
// + 1; compactions never go past that revision (see lastRev), so no event
// is ever lost. Losing one anyway fails the run.
type recorder struct {
	cli    *clientv3.Client
	prefix string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	events  []recorded
	lastRev int64 // revision of the last event received (or the start)
	err     error
	seen    chan struct{} // closed and replaced on every batch
}

// recorded is one watch event.
type recorded struct {
	rev     int64
	delete  bool
	key     string
	create  int64
	lease   int64
	value   []byte
	arrived int64 // monoNow when received
}

// startRecorder reads the prefix (which must be empty) and watches it from
// the revision of that read + 1.
func startRecorder(cli *clientv3.Client, prefix string) (*recorder, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) != 0 {
		return nil, fmt.Errorf("recorder: %d keys under %q already", len(resp.Kvs), prefix)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	r := &recorder{cli: cli, prefix: prefix, cancel: rcancel, done: make(chan struct{}),
		lastRev: resp.Header.Revision, seen: make(chan struct{})}
	go r.run(rctx)
	return r, nil
}

func (r *recorder) run(ctx context.Context) {
	defer close(r.done)
	for ctx.Err() == nil {
		r.mu.Lock()
		from := r.lastRev + 1
		r.mu.Unlock()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range r.cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
			if resp.CompactRevision != 0 {
				r.fail(fmt.Errorf("recorder: history lost: compacted at %d while resuming from %d", resp.CompactRevision, from))
				cancel()
				return
			}
			if resp.Canceled || resp.Err() != nil {
				break
			}
			r.add(resp.Events)
		}
		cancel()
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

func (r *recorder) add(evs []*clientv3.Event) {
	if len(evs) == 0 {
		return
	}
	now := monoNow()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs {
		if ev.Kv.ModRevision <= r.lastRev && len(r.events) > 0 && ev.Kv.ModRevision < r.events[len(r.events)-1].rev {
			continue // cannot happen: a resumed watch starts after the last event
		}
		r.events = append(r.events, recorded{rev: ev.Kv.ModRevision, delete: ev.Type == mvccpb.DELETE,
			key: string(ev.Kv.Key), create: ev.Kv.CreateRevision, lease: ev.Kv.Lease,
			value: append([]byte(nil), ev.Kv.Value...), arrived: now})
		r.lastRev = max(r.lastRev, ev.Kv.ModRevision)
	}
	close(r.seen)
	r.seen = make(chan struct{})
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// safeCompactRev is the highest revision the cluster may be compacted at
// without losing the recorder's history.
func (r *recorder) safeCompactRev() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastRev
}

// waitFor waits until an event on key at revision >= rev has arrived.
func (r *recorder) waitFor(ctx context.Context, key string, rev int64) error {
	for {
		r.mu.Lock()
		for i := len(r.events) - 1; i >= 0 && r.events[i].rev >= rev; i-- {
			if r.events[i].key == key {
				r.mu.Unlock()
				return nil
			}
		}
		err, seen := r.err, r.seen
		r.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-seen:
		case <-ctx.Done():
			return fmt.Errorf("recorder: waiting for %s at %d: %w", key, rev, ctx.Err())
		}
	}
}

// stop ends the watch and returns the history and the error, if any. It
// may be called more than once.
func (r *recorder) stop() ([]recorded, error) {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.events...), r.err
}

// prober issues linearizable reads in a loop and keeps the revisions they
// returned, with the time each was issued: an upper bound of the cluster's
// revision at any earlier moment.
type prober struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	probes []Probe
}

func startProber(cli *clientv3.Client, key string) *prober {
	ctx, cancel := context.WithCancel(context.Background())
	p := &prober{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			at := monoNow()
			gctx, gcancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), time.Second)
			resp, err := cli.Get(gctx, key)
			gcancel()
			if err == nil {
				p.mu.Lock()
				p.probes = append(p.probes, Probe{At: at, Revision: resp.Header.Revision})
				p.mu.Unlock()
			} else if !errors.Is(err, context.Canceled) {
				sleepCtx(ctx, 20*time.Millisecond)
			}
			sleepCtx(ctx, 30*time.Millisecond)
		}
	}()
	return p
}

// stop ends the probes and returns them. It may be called more than once.
func (p *prober) stop() []Probe {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Probe(nil), p.probes...)
}
