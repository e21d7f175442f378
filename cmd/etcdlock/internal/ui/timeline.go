package ui

// This file holds the timeline: what happened to the holders and waiters of
// each name, derived from the view's changes, and the chart's counts.

import (
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event kinds of the timeline.
const (
	kindGranted  = "granted"  // a key became a holder
	kindWaiting  = "waiting"  // a key entered the queue behind a holder
	kindReleased = "released" // a holder's key was deleted while its lease lived (Unlock, Resign, Session.Close)
	kindExpired  = "expired"  // a holder's or waiter's key went with its lease (TTL ran out, or it was revoked)
	kindBroken   = "broken"   // a Break deleted the holder's key (from this page or elsewhere)
	kindLeft     = "left"     // a waiter's key was deleted before its grant (canceled, timed out)
	kindEnded    = "ended"    // a key was deleted, and how could not be told
)

// How a key went, as etcd shows it at the deletion (see ends.of).
const (
	wentUnknown  = ""         // no barrier of its session is known: ask about the lease
	wentReleased = "released" // its session's barrier lived on
	wentExpired  = "expired"  // its session's barrier went at the same revision
	wentBroken   = "broken"   // a break marker named it
)

// event is one line of the timeline.
type event struct {
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`
	Kind     string    `json:"kind"`
	Name     string    `json:"name"`
	Token    int64     `json:"token"`
	Identity string    `json:"identity"`
	Lease    string    `json:"lease"`
	Revision int64     `json:"revision"`
	lease    clientv3.LeaseID
	key      string
	holder   bool // a holder's key (for a deletion)
}

// events returns the timeline's events for c, in order: deletions first
// (not yet classified: kindEnded, see classify), then grants, then new
// waiters.
func events(c change, rev int64, now time.Time) []event {
	was := map[etcdlock.Token]bool{}    // holders before
	waited := map[etcdlock.Token]bool{} // waiters before
	for _, e := range c.before.Holders {
		was[e.Token] = true
	}
	for _, e := range c.before.Waiters {
		waited[e.Token] = true
	}
	still := map[etcdlock.Token]bool{}
	for _, e := range append(append([]etcdlock.Entry(nil), c.after.Holders...), c.after.Waiters...) {
		still[e.Token] = true
	}
	var out []event
	mk := func(kind string, e etcdlock.Entry, holder bool) event {
		return event{At: now, Kind: kind, Name: c.name, Token: int64(e.Token), Identity: e.Identity,
			Lease: lockjson.LeaseHex(e.Lease), Revision: rev, lease: e.Lease, key: e.Key, holder: holder}
	}
	for _, e := range append(append([]etcdlock.Entry(nil), c.before.Holders...), c.before.Waiters...) {
		if !still[e.Token] {
			out = append(out, mk(kindEnded, e, was[e.Token]))
		}
	}
	for _, e := range c.after.Holders {
		if !was[e.Token] {
			out = append(out, mk(kindGranted, e, true))
		}
	}
	for _, e := range c.after.Waiters {
		if !waited[e.Token] && !was[e.Token] {
			out = append(out, mk(kindWaiting, e, false))
		}
	}
	return out
}

// classify names a deletion by how it went (see ends.of); for wentUnknown,
// by whether its lease lived on (live), if that is known at all (known).
func classify(ev *event, went string, live, known bool) {
	switch {
	case went == wentBroken:
		ev.Kind = kindBroken
	case went == wentExpired:
		ev.Kind = kindExpired
	case went == wentReleased && ev.holder:
		ev.Kind = kindReleased
	case went == wentReleased:
		ev.Kind = kindLeft
	case !known:
		ev.Kind = kindEnded
	case !live:
		ev.Kind = kindExpired
	case ev.holder:
		ev.Kind = kindReleased
	default:
		ev.Kind = kindLeft
	}
}

// timeline keeps the last events. It is not safe for concurrent use: the
// Server guards it.
type timeline struct {
	buf  []event // ring
	next int64   // the next event's sequence number
}

const timelineSize = 500

// add appends ev, numbering it, and returns it numbered.
func (t *timeline) add(ev event) event {
	ev.Seq = t.next
	t.next++
	if len(t.buf) < timelineSize {
		t.buf = append(t.buf, ev)
	} else {
		t.buf[ev.Seq%timelineSize] = ev
	}
	return ev
}

// since returns the kept events numbered from seq on, oldest first.
func (t *timeline) since(seq int64) []event {
	first := max(seq, t.next-int64(len(t.buf)), 0)
	if first >= t.next {
		return []event{}
	}
	out := make([]event, 0, t.next-first)
	for s := first; s < t.next; s++ {
		if len(t.buf) < timelineSize {
			out = append(out, t.buf[s])
		} else {
			out = append(out, t.buf[s%timelineSize])
		}
	}
	return out
}

// chart counts grants and waiters in one-second buckets over the last
// chartSpan. It is not safe for concurrent use: the Server guards it.
type chart struct {
	start   int64 // the Unix second of buckets[0]
	grants  [chartLen]int
	waiters [chartLen]int
}

const (
	chartSpan = 15 * time.Minute
	chartLen  = int(chartSpan / time.Second)
)

// advance moves the chart to now's second, carrying the waiter count.
func (c *chart) advance(now time.Time, waiters int) {
	sec := now.Unix()
	if c.start == 0 || sec-(c.start+int64(chartLen)-1) > int64(chartLen) {
		c.start = sec - int64(chartLen) + 1
		c.grants = [chartLen]int{}
		for i := range c.waiters {
			c.waiters[i] = waiters
		}
	}
	for c.start+int64(chartLen)-1 < sec {
		c.start++
		i := int((c.start + int64(chartLen) - 1) % int64(chartLen))
		c.grants[i], c.waiters[i] = 0, waiters
	}
	c.waiters[int(sec%int64(chartLen))] = waiters
}

// grant counts a grant at now.
func (c *chart) grant(now time.Time, waiters int) {
	c.advance(now, waiters)
	c.grants[int(now.Unix()%int64(chartLen))]++
}

// chartJSON is the chart as the API serves it: oldest second first.
type chartJSON struct {
	End     int64 `json:"end"` // the Unix second of the last bucket
	Step    int   `json:"step_seconds"`
	Grants  []int `json:"grants"`
	Waiters []int `json:"waiters"`
}

func (c *chart) json(now time.Time, waiters int) chartJSON {
	c.advance(now, waiters)
	out := chartJSON{End: now.Unix(), Step: 1, Grants: make([]int, chartLen), Waiters: make([]int, chartLen)}
	for k := 0; k < chartLen; k++ {
		i := int((c.start + int64(k)) % int64(chartLen))
		out.Grants[k], out.Waiters[k] = c.grants[i], c.waiters[i]
	}
	return out
}
