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
	kindMoving   = "moving"   // a sharded deployment's slot began to move (Name "slot N")
	kindMoved    = "moved"    // its move ended (the map switched, or the record was removed)
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
	Cluster  string    `json:"cluster,omitempty"` // on a sharded page: the key's cluster
	Detail   string    `json:"detail,omitempty"`  // a move's "from A to B"
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

// timeline is the page's record of what changed: the last events, numbered
// in etcd's order; the events that wait behind a deletion being named; and
// how far the event stream has sent. It is not safe for concurrent use: the
// Server guards it.
type timeline struct {
	buf     []event // ring
	next    int64   // the next event's sequence number
	pending []event // behind a deletion that is not named yet, oldest first
	sent    int64   // the first event not yet streamed
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

// record adds ev, or holds it back while a deletion waits to be named
// (record holds every deletion back) so that the timeline keeps etcd's
// order.
func (t *timeline) record(ev event) {
	if ev.Kind == kindEnded || len(t.pending) > 0 {
		t.pending = append(t.pending, ev)
		return
	}
	t.add(ev)
}

// unnamed returns a copy of the held-back events, oldest first.
func (t *timeline) unnamed() []event { return append([]event(nil), t.pending...) }

// named adds evs, the oldest held-back events (from unnamed), now named.
func (t *timeline) named(evs []event) {
	for _, ev := range evs {
		t.add(ev)
	}
	t.pending = t.pending[len(evs):]
}

// unsent returns the events the stream has not sent, and counts them sent.
func (t *timeline) unsent() []event {
	evs := t.since(t.sent)
	t.sent = t.next
	return evs
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
