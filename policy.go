package etcdlock

import "go.etcd.io/etcd/api/v3/mvccpb"

// policy decides, from the keys created before mine (nearest first, at most
// lookback of them; 0 means all), whether I hold a grant, and if not what to
// watch until the decision may change. Each recipe file holds its policy;
// exclusive (Mutex, Election) is here.
type policy interface {
	lookback() int64
	decide(ahead []*mvccpb.KeyValue) (granted bool, plan watchPlan)
	// touchOnGrant says whether a waiter that was granted after waiting must
	// rewrite its key (same value) so that the waiter behind it, which watches
	// it, re-reads the queue (Semaphore: the next waiter becomes the front).
	touchOnGrant() bool
}

// watchPlan is what a waiter watches: one key ahead of it, or (set != nil)
// the queue's whole directory, of which only the keys in set matter.
type watchPlan struct {
	key  string
	set  map[string]bool
	puts bool // a PUT on key matters too (the key's grant, see touchOnGrant)
}

func watchKey(key string) watchPlan { return watchPlan{key: key} }

// matters reports whether an event on key of type t can change the decision.
func (p watchPlan) matters(key string, t mvccpb.Event_EventType) bool {
	if p.set != nil {
		return t == mvccpb.DELETE && p.set[key]
	}
	return key == p.key && (t == mvccpb.DELETE || p.puts)
}

func (p watchPlan) equal(o watchPlan) bool {
	if p.key != o.key || p.puts != o.puts || len(p.set) != len(o.set) || (p.set == nil) != (o.set == nil) {
		return false
	}
	for k := range p.set {
		if !o.set[k] {
			return false
		}
	}
	return true
}

// exclusive is the Mutex and Election policy: granted when nobody is ahead,
// else watch the nearest key ahead.
type exclusive struct{}

func (exclusive) lookback() int64    { return 1 }
func (exclusive) touchOnGrant() bool { return false }
func (exclusive) decide(ahead []*mvccpb.KeyValue) (bool, watchPlan) {
	if len(ahead) == 0 {
		return true, watchPlan{}
	}
	return false, watchKey(string(ahead[0].Key))
}
