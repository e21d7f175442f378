//go:build linux

package safety

// This file holds the stall report: what a cell that missed its minimum
// counts shows, so that the report itself says whether the library, the
// fault schedule or a worker held the queue up. It names the front key's
// session (live, or reported lost, and its lease's TTL left), when the
// cluster last had a leader, and where each worker is blocked.

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// lostSession is a session a worker reported lost (SESSION_LOST).
type lostSession struct {
	worker int
	at     time.Time
	reason string
}

// leaderLog is what the leader lane saw. Guarded by cell.mu.
type leaderLog struct {
	name       string    // the last leader seen; "" before any
	lastSeen   time.Time // the last time a leader was seen
	lastChange time.Time // the last time the leader changed (or went)
	changes    int
}

// leaderLane notes the cluster's leader every 200 ms.
func (c *cell) leaderLane(ctx context.Context) {
	for sleepCtx(ctx, 200*time.Millisecond) {
		l, now := c.c.Leader(), time.Now()
		name := ""
		if l != nil {
			name = l.Name()
		}
		c.mu.Lock()
		if l != nil {
			c.leaders.lastSeen = now
		}
		if name != c.leaders.name {
			c.leaders.name, c.leaders.lastChange = name, now
			c.leaders.changes++
		}
		c.mu.Unlock()
	}
}

// askStatus asks every running worker that is not stopped where it is
// blocked (STATUS), and waits up to a second for the answers.
func (c *cell) askStatus() {
	c.mu.Lock()
	var ps []*proc
	for _, p := range c.procs {
		if !p.exited {
			p.status = ""
			if !p.paused {
				ps = append(ps, p)
			}
		}
	}
	c.mu.Unlock()
	for _, p := range ps {
		c.sendLine(p, "STATUS")
	}
	timeout := time.After(time.Second)
	for range ps {
		select {
		case <-c.statusCh:
		case <-timeout:
			return
		}
	}
}

// stallReport says where each worker is and what the queue holds, for a
// cell that did not reach its minimum counts.
func (c *cell) stallReport(start time.Time) string {
	c.askStatus()
	var b strings.Builder
	now := time.Now()
	fmt.Fprintf(&b, "cell started %s; now %s\n", start.Format(stamp), now.Format(stamp))
	c.mu.Lock()
	lg := c.leaders
	fmt.Fprintf(&b, "leader: %q; a leader last seen %s ago; last change %s ago (%d changes)\n",
		lg.name, since(now, lg.lastSeen), since(now, lg.lastChange), lg.changes)
	owner := map[int64]int{} // lease -> worker whose current session it is
	for _, p := range c.procs {
		if p.exited {
			continue
		}
		owner[p.lease] = p.id
		fmt.Fprintf(&b, "worker %d: steady=%v paused=%v busy=%v pending=%v lease=%x grants=%d armTargeted=%v armCS=%v scenario=%v\n",
			p.id, p.steady, p.paused, p.busy, p.pend != nil, p.lease, p.grants, c.armTargeted, c.armCS, c.scen != nil)
		switch {
		case p.paused:
			fmt.Fprintf(&b, "    blocked in: (stopped)\n")
		case p.status != "":
			fmt.Fprintf(&b, "    blocked in: %s\n", p.status)
		default:
			fmt.Fprintf(&b, "    blocked in: (no answer to STATUS)\n")
		}
		for _, l := range p.recent {
			fmt.Fprintf(&b, "    %s\n", l)
		}
		if log := lastLines(p.stderr.String(), recentLines); log != "" {
			fmt.Fprintf(&b, "    library log:\n%s", log)
		}
	}
	lost := make(map[int64]lostSession, len(c.lost))
	for k, v := range c.lost {
		lost[k] = v
	}
	c.mu.Unlock()
	b.WriteString(c.queueReport(owner, lost))
	return b.String()
}

// queueReport lists the queue's keys and says whose session the front
// key's lease is, and what etcd says of that lease.
func (c *cell) queueReport(owner map[int64]int, lost map[int64]lostSession) string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		fmt.Fprintf(&b, "queue: %v\n", err)
		return b.String()
	}
	fmt.Fprintf(&b, "queue at revision %d:\n", resp.Header.Revision)
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "    %s create=%d mod=%d lease=%x\n", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Lease)
	}
	if len(resp.Kvs) == 0 {
		return b.String()
	}
	front := resp.Kvs[0].Lease
	whose := "no running worker's current session"
	if id, ok := owner[front]; ok {
		whose = fmt.Sprintf("worker %d's current session", id)
	}
	if l, ok := lost[front]; ok {
		whose += fmt.Sprintf(", reported lost by worker %d %s ago (%s)", l.worker, since(time.Now(), l.at), l.reason)
	} else {
		whose += ", not reported lost"
	}
	ttl := "TimeToLive: "
	if tr, err := c.cli.TimeToLive(ctx, clientv3.LeaseID(front)); err != nil {
		ttl += err.Error()
	} else if tr.TTL <= 0 {
		ttl += "gone"
	} else {
		ttl += fmt.Sprintf("%d s left of %d s", tr.TTL, tr.GrantedTTL)
	}
	fmt.Fprintf(&b, "front key's lease %x: %s; %s\n", front, whose, ttl)
	return b.String()
}

const stamp = "15:04:05.000"

// since says how long before now t was, or "never" for a zero t.
func since(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return now.Sub(t).Round(100 * time.Millisecond).String()
}

// lastLines returns the last n lines of s, each indented.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			fmt.Fprintf(&b, "        %s\n", l)
		}
	}
	return b.String()
}
