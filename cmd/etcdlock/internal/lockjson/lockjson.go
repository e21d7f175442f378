// Package lockjson is the JSON shape of a lock's state that etcdlock's
// status, ls and ui commands print and serve: one definition, so that a
// script written against `etcdlock status -o json` reads the status page's
// API too.
package lockjson

import (
	"strconv"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Entry is one holder or waiter.
type Entry struct {
	Key      string `json:"key"`
	Token    int64  `json:"token"`
	Lease    string `json:"lease"` // hex, as etcdctl prints leases
	Identity string `json:"identity"`
	Kind     string `json:"kind"`
	Mode     string `json:"mode,omitempty"`
	Size     int    `json:"size,omitempty"` // a semaphore's size
	Value    string `json:"value,omitempty"`
	// Enqueued is when the key entered the queue, by the clock of the
	// client that wrote it (RFC 3339); InQueue is the seconds since, by
	// this process's clock. Both are absent for keys of older versions.
	Enqueued string   `json:"enqueued,omitempty"`
	InQueue  *float64 `json:"in_queue_seconds,omitempty"`
	// Granted is when a holder was granted (RFC 3339, its client's clock;
	// see etcdlock.Entry.Granted) and Held the seconds since, by this
	// process's clock; both absent for waiters and for keys of older
	// versions.
	Granted string   `json:"granted,omitempty"`
	Held    *float64 `json:"held_seconds,omitempty"`
	// LockDelay is the lock-delay of the key's session in seconds (see
	// etcdlock.WithLockDelay); absent when it has none.
	LockDelay *float64 `json:"lock_delay_seconds,omitempty"`
	// LeaseTTLLeft is the lease's remaining time in seconds, -1 when the
	// lease is gone; absent when it was not asked for.
	LeaseTTLLeft *int64 `json:"lease_ttl_left,omitempty"`
}

// Status is a name's state: etcdlock.LockState with the leases' time left,
// and (status only) the name's completion record.
type Status struct {
	Name     string   `json:"name"`
	Revision int64    `json:"revision"`
	Holder   *Entry   `json:"holder"` // null when free; holders[0] otherwise
	Holders  []Entry  `json:"holders"`
	Waiters  []Entry  `json:"waiters"`
	LastRun  *LastRun `json:"last_run,omitempty"`
	// Where the name lives in a sharded deployment (absent for one
	// cluster): its cluster, slot, and the slot's generation there.
	Cluster    string `json:"cluster,omitempty"`
	Slot       *int   `json:"slot,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// Moving is set (status only) while the name's slot is moving or its
	// stamp on its cluster is not active: acquisitions wait.
	Moving *Moving `json:"moving,omitempty"`
}

// Moving is a sharded name's slot during a move.
type Moving struct {
	// From, To, Started (RFC 3339, the mover's clock) and Owner describe
	// the move the root records; absent when none is.
	From    string `json:"from,omitempty"`
	To      string `json:"to,omitempty"`
	Started string `json:"started,omitempty"`
	Owner   string `json:"owner,omitempty"`
	// Stamp is the state of the slot's stamp on the name's cluster:
	// "active", "frozen", ..., or "none".
	Stamp string `json:"stamp"`
	// AcquisitionsWait is true while the stamp is not active: acquisitions
	// of the slot's names wait until the move ends.
	AcquisitionsWait bool `json:"acquisitions_wait"`
}

// LastRun is a name's completion record (etcdlock.Completion): the last
// run of RunOnce or run --once that completed.
type LastRun struct {
	ID       string `json:"id"`
	Token    int64  `json:"token"`
	Identity string `json:"identity"`
	At       string `json:"at"`       // RFC 3339, the recording client's clock
	Revision int64  `json:"revision"` // the record's
}

// FromCompletion returns c's JSON shape.
func FromCompletion(c etcdlock.Completion) *LastRun {
	return &LastRun{ID: c.ID, Token: int64(c.Token), Identity: c.Identity, At: c.At.Format(time.RFC3339Nano), Revision: c.Revision}
}

// FromEntry returns e's JSON shape at now, with the time left on its lease
// if ttls has it. It cannot fail and is safe for concurrent use.
func FromEntry(e etcdlock.Entry, ttls map[clientv3.LeaseID]int64, now time.Time) Entry {
	j := Entry{Key: e.Key, Token: int64(e.Token), Lease: LeaseHex(e.Lease), Identity: e.Identity,
		Kind: e.Kind, Mode: e.Mode, Size: e.Size, Value: e.Value}
	if !e.Enqueued.IsZero() {
		j.Enqueued = e.Enqueued.Format(time.RFC3339Nano)
		age := max(0, now.Sub(e.Enqueued)).Seconds()
		j.InQueue = &age
	}
	if !e.Granted.IsZero() {
		j.Granted = e.Granted.Format(time.RFC3339Nano)
		held := max(0, now.Sub(e.Granted)).Seconds()
		j.Held = &held
	}
	if e.LockDelay > 0 {
		d := e.LockDelay.Seconds()
		j.LockDelay = &d
	}
	if ttl, ok := ttls[e.Lease]; ok {
		j.LeaseTTLLeft = &ttl
	}
	return j
}

// FromState returns st's JSON shape at now, with the leases' time left that
// ttls has. It cannot fail and is safe for concurrent use.
func FromState(st *etcdlock.LockState, ttls map[clientv3.LeaseID]int64, now time.Time) Status {
	out := Status{Name: st.Name, Revision: st.Revision, Holders: []Entry{}, Waiters: []Entry{}}
	for _, e := range st.Holders {
		out.Holders = append(out.Holders, FromEntry(e, ttls, now))
	}
	for _, e := range st.Waiters {
		out.Waiters = append(out.Waiters, FromEntry(e, ttls, now))
	}
	if len(out.Holders) > 0 {
		out.Holder = &out.Holders[0]
	}
	return out
}

// FromShardState is FromState of a name that also says where it lives
// (on a sharded deployment: st.Cluster is set).
func FromShardState(st *shard.State, ttls map[clientv3.LeaseID]int64, now time.Time) Status {
	out := FromState(&st.LockState, ttls, now)
	if st.Cluster != "" {
		slot := st.Slot
		out.Cluster, out.Slot, out.Generation = st.Cluster, &slot, st.Generation
	}
	return out
}

// LeaseHex formats a lease ID as etcd and the key layout do.
func LeaseHex(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }
