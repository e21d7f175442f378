package ui

// This file holds the view: every queue key under the prefix, grouped by
// name, as one paged read and then one watch left it.

import (
	"sort"
	"strings"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// view is the page's picture of etcd. It is not safe for concurrent use:
// the Server guards it.
type view struct {
	names map[string]map[string]*mvccpb.KeyValue // name -> key -> its latest version
	// barriers are the sessions' barrier keys under the prefix: a session
	// has one in each name it uses, until its lease ends (see
	// layout.SessionOfKey).
	barriers map[barrier]bool
	sorted   []string // the names in order; nil when it must be rebuilt
	rev      int64    // the revision the view is at
	keys     int      // how many keys it holds
	nwait    int      // how many of them wait
}

func newView() *view {
	return &view{names: map[string]map[string]*mvccpb.KeyValue{}, barriers: map[barrier]bool{}}
}

// barrier names a session's barrier key: its name and lease.
type barrier struct {
	name  string
	lease clientv3.LeaseID
}

// change is what one batch of events did to one name: its state before
// and after.
type change struct {
	name          string
	before, after etcdlock.LockState
}

// put adds or replaces kv, if it is a queue key under prefix, or notes a
// session's barrier.
func (v *view) put(prefix string, kv *mvccpb.KeyValue) (string, bool) {
	if name, lease, ok := layout.SessionOfKey(string(kv.Key)); ok {
		v.barriers[barrier{name, lease}] = true
		return "", false
	}
	name, ok := layout.NameOfKey(string(kv.Key))
	if !ok || !strings.HasPrefix(name, prefix) {
		return "", false
	}
	keys := v.names[name]
	if keys == nil {
		keys = map[string]*mvccpb.KeyValue{}
		v.names[name] = keys
		v.sorted = nil
	}
	if _, ok := keys[string(kv.Key)]; !ok {
		v.keys++
	}
	keys[string(kv.Key)] = compact(kv)
	return name, true
}

// compact keeps what StateOf reads of kv, and nothing of the watch's buffers.
func compact(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: append([]byte(nil), kv.Key...), Value: append([]byte(nil), kv.Value...),
		CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: kv.Lease}
}

// del removes key, if the view has it.
func (v *view) del(key string) (string, bool) {
	if name, lease, ok := layout.SessionOfKey(key); ok {
		delete(v.barriers, barrier{name, lease})
		return "", false
	}
	name, ok := layout.NameOfKey(key)
	if !ok {
		return "", false
	}
	keys := v.names[name]
	if _, ok := keys[key]; !ok {
		return "", false
	}
	delete(keys, key)
	v.keys--
	if len(keys) == 0 {
		delete(v.names, name)
		v.sorted = nil
	}
	return name, true
}

// apply applies one watch response's events (all at revisions after the
// view's) and returns what they did to each name they touched.
func (v *view) apply(prefix string, evs []*mvccpb.Event, rev int64) []change {
	touched := map[string]etcdlock.LockState{}
	var order []string
	remember := func(key string) {
		name, ok := layout.NameOfKey(key)
		if !ok || !strings.HasPrefix(name, prefix) {
			return
		}
		if _, seen := touched[name]; !seen {
			touched[name] = v.state(name)
			order = append(order, name)
		}
	}
	for _, ev := range evs {
		remember(string(ev.Kv.Key))
		if ev.Type == mvccpb.DELETE {
			v.del(string(ev.Kv.Key))
		} else {
			v.put(prefix, ev.Kv)
		}
	}
	v.rev = max(v.rev, rev)
	out := make([]change, 0, len(order))
	for _, name := range order {
		c := change{name: name, before: touched[name], after: v.state(name)}
		v.nwait += len(c.after.Waiters) - len(c.before.Waiters)
		out = append(out, c)
	}
	return out
}

// countWaiters sets nwait from every name's state (after a load).
func (v *view) countWaiters() {
	v.nwait = 0
	for name := range v.names {
		v.nwait += len(v.state(name).Waiters)
	}
}

// state returns name's state as the view has it.
func (v *view) state(name string) etcdlock.LockState {
	keys := v.names[name]
	kvs := make([]*mvccpb.KeyValue, 0, len(keys))
	for _, kv := range keys {
		kvs = append(kvs, kv)
	}
	return etcdlock.StateOf(name, kvs, v.rev)
}

// match returns the names that contain filter (all for ""), in order, and
// how many there are in all.
func (v *view) match(filter string) []string {
	if v.sorted == nil {
		v.sorted = make([]string, 0, len(v.names))
		for name := range v.names {
			v.sorted = append(v.sorted, name)
		}
		sort.Strings(v.sorted)
	}
	if filter == "" {
		return v.sorted
	}
	var out []string
	for _, name := range v.sorted {
		if strings.Contains(name, filter) {
			out = append(out, name)
		}
	}
	return out
}
