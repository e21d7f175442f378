package safety

// This file holds the building of a cell's history: the workers' reports
// and etcd's record.

import (
	"context"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock"
)

// collect builds the history: the workers' reports, the final value, then
// etcd's record up to a sentinel written last.
func (c *cell) collect() *History {
	h := c.history()
	h.SharedGrants = c.cfg.role == roleRW
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.waitQueueEmpty(ctx)
	resp, err := c.cli.Put(ctx, c.sentinel, "end")
	if err != nil {
		c.t.Fatalf("sentinel: %v", err)
	}
	if err := c.rec.waitFor(ctx, c.sentinel, resp.Header.Revision); err != nil {
		c.errorf("%v", err)
	}
	events, recErr := c.rec.stop()
	if recErr != nil {
		c.errorf("%v", recErr)
	}
	h.Probes = c.prb.stop()
	c.fillFromEtcd(h, events)
	return h
}

// waitQueueEmpty waits until the lock has neither holder nor waiter (the
// leases of killed workers run out).
func (c *cell) waitQueueEmpty(ctx context.Context) {
	for {
		st, err := etcdlock.Describe(ctx, c.cli, c.name)
		if err == nil && st.Holder == nil && len(st.Waiters) == 0 {
			return
		}
		if ctx.Err() != nil {
			c.errorf("the queue of %q did not drain after the workers stopped: %+v %v", c.name, st, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// history builds the History from what the workers reported and the final
// value; fillFromEtcd adds etcd's record.
func (c *cell) history() *History {
	c.mu.Lock()
	h := &History{Ops: append([]Op(nil), c.ops...), Grants: append([]Grant(nil), c.grants...), QueueDir: c.dir,
		LostWaits: append([]LostWait(nil), c.lostWaits...), Cancels: c.allCancels(),
		LeaseAlives: append([]LeaseAlive(nil), c.leaseAlives...)}
	c.mu.Unlock()
	if c.reg != nil {
		h.Final = c.reg.Value()
		h.Admissions = c.reg.Admissions()
	} else {
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.cli.Get(ctx, c.counterKey)
			cancel()
			if err != nil {
				if attempt == 10 {
					c.t.Fatalf("final counter: %v", err)
				}
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if len(resp.Kvs) > 0 {
				v, _, err := parseCounter(resp.Kvs[0].Value)
				if err != nil {
					c.errorf("final counter: %v", err)
				}
				h.Final = v
			}
			break
		}
	}
	h.FinalAt = monoNow()
	return h
}

func (c *cell) fillFromEtcd(h *History, events []recorded) {
	var prev int64
	for _, ev := range events {
		switch {
		case strings.HasPrefix(ev.key, c.dir):
			h.Queue = append(h.Queue, QueueEvent{Revision: ev.rev, Delete: ev.delete, Key: ev.key,
				CreateRevision: ev.create, Lease: ev.lease, Arrived: ev.arrived})
		case ev.key == c.counterKey && !ev.delete:
			v, tok, err := parseCounter(ev.value)
			if err != nil {
				c.errorf("counter at revision %d: %v", ev.rev, err)
				continue
			}
			h.Admissions = append(h.Admissions, Admission{Seq: ev.rev, Write: true, Token: tok, Admitted: true, Prev: prev, Value: v})
			prev = v
		}
	}
	if c.reg == nil {
		h.AdmissionsAtRevisions = true
	}
}

// allCancels returns the canceled Locks, with those still running (no
// CANCELED yet: the worker was killed or the cell ended) as ending now.
// c.mu is held.
func (c *cell) allCancels() []Cancel {
	out := append([]Cancel(nil), c.cancels...)
	for _, p := range c.procs {
		if cl := p.canceling; cl != nil {
			end := *cl
			end.End = monoNow()
			out = append(out, end)
		}
	}
	return out
}
