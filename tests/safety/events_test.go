package safety

import (
	"sort"
	"strconv"
	"strings"

	"github.com/etcdlock/etcdlock"
)

// Outcome is what a client learned about the write of an increment.
type Outcome int

const (
	// Acked: the resource acknowledged the write.
	Acked Outcome = iota
	// Rejected: the resource refused the write (a stale token, a failed
	// guard); it had no effect.
	Rejected
	// Unknown: no answer (a timeout, a crash after the write was sent); the
	// write may or may not have taken effect.
	Unknown
	// NotSent: the client never sent the write (it was killed or stopped
	// before); it had no effect.
	NotSent
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Acked:
		return "ok"
	case Rejected:
		return "rejected"
	case Unknown:
		return "unknown"
	case NotSent:
		return "not-sent"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Op is one increment attempted by a client under a grant: a read of the
// value that the resource admitted, then a write of Value+1 with the same
// token. Reads the resource refused are not Ops: they had no effect. Times
// are on one clock shared by every process of the test (nanoseconds).
type Op struct {
	// Client identifies the client (a process incarnation); it becomes the
	// client id of the visualization.
	Client     int
	Token      etcdlock.Token // the grant's token, sent with the read and the write
	ReadCall   int64          // when the read was sent
	ReadReturn int64          // when its answer came
	// Value is what the read returned; the write wrote Value+1.
	Value int64
	// WriteCall and WriteReturn bound the write; they are meaningful for
	// Acked and Rejected only.
	WriteCall   int64
	WriteReturn int64   // when its answer came
	Outcome     Outcome // what the client learned about the write
}

// Grant is a grant a client reported: Lock (or Campaign) returned Token,
// whose key is Key, at time At (the client's clock reading right after the
// call returned).
type Grant struct {
	Client int            // as in Op
	Token  etcdlock.Token // the grant's token (its key's create revision)
	Key    string         // the grant's key
	At     int64          // when the call returned
	// Released is when the holder began to give the grant back (right
	// before it called Unlock, or before its lead function returned); 0 if
	// it never did (it was killed first).
	Released int64
}

// LostWait is a Lock of client Client's session on Lease that failed at At
// with ErrLockLost.
type LostWait struct {
	Client int
	Lease  int64
	At     int64
}

// Cancel is a Lock that its client bounded (the late-write scenario), from
// its call (Start) to its return (End): its key may reach the front of the
// queue and be deleted without a grant.
type Cancel struct {
	Client     int
	Lease      int64
	Start, End int64
}

// Probe is a linearizable read the test made while the workload ran: issued
// at At, it answered with the cluster's Revision, so every revision
// committed before At is at most Revision.
type Probe struct {
	At       int64 // when the read was issued
	Revision int64 // the revision it answered with
}

// QueueEvent is one event of etcd's watch on the lock's keys, in revision
// order: the creation of a key (Delete false, CreateRevision == Revision,
// Lease set) or its deletion (Delete true). A session may reuse a key name
// once its previous key of that name is gone: a key is identified by its
// name and its create revision.
type QueueEvent struct {
	Revision       int64  // the event's revision
	Delete         bool   // a deletion; else a creation (or a rewrite, which is ignored)
	Key            string // the key
	CreateRevision int64  // the key's create revision (creations only)
	Lease          int64  // the key's lease (creations only)
	// Arrived is when the test received the event (0: unknown): the
	// event's revision was committed before then.
	Arrived int64
}

// History is everything the checkers look at, collected from one run.
type History struct {
	// Ops are the increments the clients attempted, in any order.
	Ops []Op
	// Final is the value read once every client had stopped, at FinalAt
	// (later than every op's call).
	Final   int64
	FinalAt int64 // when Final was read
	// Admissions is the resource's log of what it admitted, in its order.
	Admissions []Admission
	// AdmissionsAtRevisions says that Admission.Seq is the etcd revision of
	// the write (state kept in etcd behind Lock.Guard): the checkers then
	// check each write against the queue at that revision.
	AdmissionsAtRevisions bool
	// QueueDir is the key prefix of the lock's queue ("etcdlock/<name>%/");
	// Queue holds the watch events under it from before the first
	// operation to after the last (other keys are ignored).
	QueueDir string
	Queue    []QueueEvent // in revision order
	// Grants are the grants the clients reported.
	Grants []Grant
	// SharedGrants says that some grants were shared (RWMutex readers):
	// Grants and FIFO, whose model of the queue is a Mutex's, are not run.
	SharedGrants bool
	// Probes are revision probes in the order they were issued.
	Probes []Probe
	// LostWaits are the Locks that failed with ErrLockLost (the waiter's
	// key was deleted by someone else) while their clients waited.
	LostWaits []LostWait
	// Cancels are the Locks that the clients bounded, which may end
	// without a grant.
	Cancels []Cancel
	// LeaseAlives are leases that clients found alive (TimeToLive) at
	// given times: a lease alive at At was alive at every revision
	// committed before At.
	LeaseAlives []LeaseAlive
}

// LeaseAlive says that Lease was alive when a TimeToLive sent at At or
// later answered (workers ask after a Lock fails with ErrLockLost and before they
// close a session).
type LeaseAlive struct {
	Lease int64
	At    int64
}

// queueKey is one key of the lock's queue, rebuilt from the watch history.
type queueKey struct {
	key    string
	create int64
	del    int64 // 0: never deleted
	delAt  int64 // when the test received the deletion (0: unknown)
	at     int64 // when the test received the creation (0: unknown)
	lease  int64
	front  int64 // revision from which it was the lowest live key; 0 if never
}

// queueState is the queue rebuilt from a History's watch events.
type queueState struct {
	keys     []*queueKey // by create revision
	byCreate map[int64]*queueKey
}

// inf stands for "never" among revisions.
const inf = int64(1<<63 - 1)

func buildQueue(h *History) *queueState {
	q := &queueState{byCreate: map[int64]*queueKey{}}
	// A session reuses its key names once the previous key is gone, so a
	// key is its name and its create revision; a deletion ends the name's
	// live instance.
	live := map[string]*queueKey{}
	for _, ev := range h.Queue {
		if !strings.HasPrefix(ev.Key, h.QueueDir) {
			continue
		}
		if !ev.Delete {
			if ev.CreateRevision != ev.Revision {
				continue // a rewrite of a live key (Proclaim, touch)
			}
			k := &queueKey{key: ev.Key, create: ev.CreateRevision, lease: ev.Lease, at: ev.Arrived}
			live[ev.Key] = k
			q.byCreate[k.create] = k
			q.keys = append(q.keys, k)
			continue
		}
		if k, ok := live[ev.Key]; ok {
			k.del = ev.Revision
			k.delAt = ev.Arrived
			delete(live, ev.Key)
		}
	}
	sort.Slice(q.keys, func(i, j int) bool { return q.keys[i].create < q.keys[j].create })
	// A key is the lowest live key from max(its creation, the last deletion
	// of a key created before it) until its own deletion.
	maxDel := int64(0)
	for _, k := range q.keys { // in create order
		if maxDel != inf {
			f := max(k.create, maxDel)
			if k.del == 0 || f < k.del {
				k.front = f
			}
		}
		if k.del == 0 {
			maxDel = inf
		} else {
			maxDel = max(maxDel, k.del)
		}
	}
	return q
}

// lowestAt reports whether k was the lowest live key of the queue at rev.
func (k *queueKey) lowestAt(rev int64) bool {
	return k.front != 0 && k.front <= rev && (k.del == 0 || rev < k.del)
}
