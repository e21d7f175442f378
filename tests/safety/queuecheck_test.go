package safety

// This file holds the checkers of the queue as etcd recorded it: grants,
// FIFO order, and grants that ended under a live holder.

import (
	"sort"
	"time"

	"github.com/etcdlock/etcdlock"
)

// CheckGrants checks every reported grant against etcd's record of the
// queue (see Grants) and returns what it found.
//
// The revision at which the library decided a grant is not exposed, so the
// check is: the key was the lowest live key at some revision R with
// creation <= R <= P, where P is the revision returned by the first
// linearizable probe issued after the client stamped the grant (any
// revision the grant decision read was committed before that probe).
func CheckGrants(h *History) []string {
	var n int
	return checkGrants(h, &n)
}

func checkGrants(h *History, unbounded *int) []string {
	var v violations
	q := buildQueue(h)
	probes := append([]Probe(nil), h.Probes...)
	sort.Slice(probes, func(i, j int) bool { return probes[i].At < probes[j].At })
	reported := map[etcdlock.Token]bool{}
	for _, g := range h.Grants {
		if reported[g.Token] {
			v.add("token %d reported granted twice", g.Token)
			continue
		}
		reported[g.Token] = true
		k := q.byCreate[int64(g.Token)]
		switch {
		case k == nil:
			v.add("grant of token %d (client %d): no key was created at revision %d in the queue", g.Token, g.Client, g.Token)
			continue
		case g.Key != "" && g.Key != k.key:
			v.add("grant of token %d: key %q, but the queue's key of that revision is %q", g.Token, g.Key, k.key)
		case k.front == 0:
			v.add("grant of token %d (client %d): its key was never the lowest live key (deleted at %d)", g.Token, g.Client, k.del)
			continue
		}
		i := sort.Search(len(probes), func(i int) bool { return probes[i].At >= g.At })
		if i == len(probes) {
			*unbounded++
			continue
		}
		if p := probes[i]; k.front > p.Revision {
			v.add("grant of token %d (client %d) reported while the cluster was at revision <= %d, but its key was the lowest live key only from revision %d",
				g.Token, g.Client, p.Revision, k.front)
		}
	}
	return v.list()
}

// CheckFIFO checks the queue's grant order (see FIFO) and returns
// what it found. A waiter "stayed alive" when its lease created a later key
// in the queue: its session outlived the acquisition, so nothing but a
// grant can have ended it (the workers do not time out a Lock), unless
// its client canceled the Lock (see canceledKey).
func CheckFIFO(h *History) []string {
	var v violations
	q := buildQueue(h)
	reported := map[int64]bool{}
	for _, g := range h.Grants {
		reported[int64(g.Token)] = true
	}
	lastByLease := map[int64]int64{}
	for _, k := range q.keys {
		lastByLease[k.lease] = max(lastByLease[k.lease], k.create)
	}
	var prev *queueKey
	for _, k := range q.keys {
		if k.front == 0 {
			continue
		}
		if reported[k.create] {
			if prev != nil && k.front <= prev.front {
				v.add("token %d reached the front at revision %d, not after token %d (at %d)", k.create, k.front, prev.create, prev.front)
			}
			prev = k
			continue
		}
		if later := lastByLease[k.lease]; later > k.create && !canceledKey(q, h, k, later) {
			v.add("waiter %s (token %d) reached the front at revision %d while its session lived on (it enqueued again at %d), but was never granted",
				k.key, k.create, k.front, later)
		}
	}
	return v.list()
}

// CheckHeld checks that no grant was lost while its holder held it and its
// session lived on (see Held) and returns what it found. The evidence is
// etcd's: the deletion's event arrived at the test (so it was committed)
// before the holder stamped the start of its release, and the key's lease
// created a later key of the queue (so the deletion was not the lease's
// expiry or revocation, which would end the lease for good).
func CheckHeld(h *History) []string {
	var v violations
	q := buildQueue(h)
	lastByLease := map[int64]int64{}
	for _, k := range q.keys {
		lastByLease[k.lease] = max(lastByLease[k.lease], k.create)
	}
	for _, g := range h.Grants {
		k := q.byCreate[int64(g.Token)]
		if k == nil || k.del == 0 || k.delAt == 0 || g.Released == 0 || k.delAt >= g.Released {
			continue
		}
		if later := lastByLease[k.lease]; later > k.del {
			v.add("grant of token %d (client %d, key %s) lost while held: its key was deleted at revision %d, %v before its holder began to release it, and its session lived on (its lease created a key at revision %d): two holders",
				g.Token, g.Client, k.key, k.del, time.Duration(g.Released-k.delAt), later)
		}
	}
	// A lease that ends never comes back, so a lease found alive after the
	// failed Lock, or a grant of it reported after that, says that the
	// session was live: the key was not lost with it.
	for _, lw := range h.LostWaits {
		if aliveAfter(h, lw.Lease, lw.At) {
			v.add("client %d's Lock on lease %x failed with ErrLockLost (its key deleted while it waited), yet the lease was alive after it failed: a delete it did not send",
				lw.Client, lw.Lease)
			continue
		}
		for _, g := range h.Grants {
			if k := q.byCreate[int64(g.Token)]; k != nil && k.lease == lw.Lease && g.At > lw.At {
				v.add("client %d's Lock on lease %x failed with ErrLockLost (its key deleted while it waited), yet its session lived on (granted token %d %v later): a delete it did not send",
					lw.Client, lw.Lease, g.Token, time.Duration(g.At-lw.At))
				break
			}
		}
	}
	return v.list()
}

// canceledKey reports whether k, never granted, may be the key of a Lock
// its client canceled: its lease's client had begun a canceled Lock before
// the key was created, no other key of its name was created in between (a
// canceled Lock's name is not reused before its key is gone), and the key
// was deleted while the session lived on (see deletedLive). A key that a
// late write re-created after its name was given up (a phantom) is deleted
// only with its lease, or after its name was used again, so it is not
// excused.
func canceledKey(q *queueState, h *History, k *queueKey, later int64) bool {
	if k.del == 0 || k.at == 0 || !deletedLive(q, h, k, later) {
		return false
	}
	for _, c := range h.Cancels {
		if c.Lease != k.lease || c.Start > k.at {
			continue
		}
		reused := false
		for _, g := range q.keys {
			if g.key == k.key && g != k && g.at >= c.Start && g.at < k.at {
				reused = true
				break
			}
		}
		if !reused {
			return true
		}
	}
	return false
}

// deletedLive reports whether k's deletion came while its lease lived: the
// lease created a key after it (at revision later), a client found the
// lease alive after the test had received the deletion, or another key of
// the lease was live at that revision and deleted after it (a lease that
// ends takes all its keys in one revision).
func deletedLive(q *queueState, h *History, k *queueKey, later int64) bool {
	if later > k.del {
		return true
	}
	if k.delAt != 0 && aliveAfter(h, k.lease, k.delAt) {
		return true
	}
	for _, o := range q.keys {
		if o != k && o.lease == k.lease && o.create < k.del && (o.del == 0 || o.del > k.del) {
			return true
		}
	}
	return false
}

// aliveAfter reports whether a client found lease alive (see LeaseAlive)
// with a TimeToLive sent at t or later: it was alive at every revision
// committed by t.
func aliveAfter(h *History, lease, t int64) bool {
	for _, a := range h.LeaseAlives {
		if a.Lease == lease && a.At >= t {
			return true
		}
	}
	return false
}
