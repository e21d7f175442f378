package etcdlock

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/etcdx"
	"github.com/etcdlock/etcdlock/internal/layout"
)

const listPage = etcdx.Page

// Entry is one key of a lock's queue: a holder or a waiter.
type Entry struct {
	Key      string
	Token    Token
	Lease    clientv3.LeaseID
	Identity string
	Kind     string // "mutex", "election", "semaphore", "rwmutex"
	Mode     string // "read" or "write" for an RWMutex; "" otherwise
	Size     int    // a semaphore's size (its most holders); 0 otherwise
	Value    string // the election value; "" otherwise
	// Enqueued is when the key entered the queue, to the millisecond, by
	// the clock of the client that wrote it (not etcd's); zero for keys of
	// versions before it was recorded.
	Enqueued time.Time
	// Granted is when a holder was granted, to the millisecond, by the
	// clock of its client: the grant stamp its session writes just after a
	// wait ends (in the background, so a holder granted a moment ago may
	// not have it yet), or, for a key with none, Enqueued (a key granted as
	// it entered the queue needs no stamp). Zero for a waiter, and for a
	// holder of a version that recorded neither. A holder that has held
	// for at least D has a Granted at least D old (see GrantedAtEnqueue for
	// a key without a stamp).
	Granted time.Time
	// Stamped says Granted is the key's grant stamp, not its Enqueued.
	Stamped bool
	// LockDelay is the lock-delay of the key's session (WithLockDelay): if
	// the session is lost while it holds, its grant passes on only this long
	// after. Zero when none was set.
	LockDelay time.Duration
}

// LockState is what Describe and List report about one name.
type LockState struct {
	Name     string
	Holder   *Entry  // nil when free; &Holders[0] otherwise
	Holders  []Entry // every current holder, lowest token first
	Waiters  []Entry // in grant order
	Revision int64   // the etcd revision this state was read at
}

// Describe reads the holders and waiters of name in one linearizable read.
// A free name gives a LockState with no holder and no waiters. It returns an
// error wrapping ErrInvalidArgument for a nil client, ErrInvalidName for a bad
// name, and the read's error (wrapping ctx's) otherwise. Describe is a
// snapshot: the state may change as soon as it returns.
func Describe(ctx context.Context, cli *clientv3.Client, name string) (*LockState, error) {
	if cli == nil {
		return nil, newError("describe", name, fmt.Errorf("%w: nil client", ErrInvalidArgument))
	}
	if err := validateName(name); err != nil {
		return nil, newError("describe", "", err)
	}
	resp, err := cli.Get(ctx, namePrefix(name), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, newError("describe", name, ctxErr(ctx, err))
	}
	st := buildState(name, resp.Kvs, resp.Header.Revision)
	return &st, nil
}

// List returns the state of every name that starts with prefix ("" for all)
// and has a holder or a waiter, sorted by name, read at one revision (in
// pages of 1000 keys). It returns an error wrapping ErrInvalidArgument for a
// nil client, and the read's error (wrapping ctx's) otherwise.
func List(ctx context.Context, cli *clientv3.Client, prefix string) ([]LockState, error) {
	if cli == nil {
		return nil, newError("list", prefix, fmt.Errorf("%w: nil client", ErrInvalidArgument))
	}
	byName := map[string][]*mvccpb.KeyValue{}
	rev, err := etcdx.ReadPrefix(ctx, cli, listPrefix(prefix), func(kv *mvccpb.KeyValue) {
		if pk, ok := layout.ParseKey(string(kv.Key)); ok && strings.HasPrefix(pk.Name, prefix) {
			byName[pk.Name] = append(byName[pk.Name], kv)
		}
	})
	if err != nil {
		return nil, newError("list", prefix, ctxErr(ctx, err))
	}
	out := make([]LockState, 0, len(byName))
	for name, kvs := range byName {
		sort.Slice(kvs, func(i, j int) bool { return kvs[i].CreateRevision < kvs[j].CreateRevision })
		out = append(out, buildState(name, kvs, rev))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// StateOf returns what Describe reports for name when its read returns kvs
// at revision rev. kvs may be in any order; keys of other names and keys
// that are not queue keys are left out, so a program that watches a prefix
// can keep its own view of many names with it (README's key layout says
// which name a key belongs to). It does not modify kvs, cannot fail, and
// is safe for concurrent use.
func StateOf(name string, kvs []*mvccpb.KeyValue, rev int64) LockState {
	sorted := append([]*mvccpb.KeyValue(nil), kvs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].CreateRevision < sorted[j].CreateRevision })
	return buildState(name, sorted, rev)
}

// buildState splits a name's keys (sorted by create revision) into holders
// and waiters by the rules of the kind of the first key.
func buildState(name string, kvs []*mvccpb.KeyValue, rev int64) LockState {
	st := LockState{Name: name, Revision: rev}
	entries := make([]Entry, 0, len(kvs))
	for _, kv := range kvs {
		pk, ok := layout.ParseKey(string(kv.Key))
		if !ok || pk.Name != name {
			continue
		}
		kind, mode := kindOfTag(pk.Tag)
		v := decodeValue(kv.Value)
		e := Entry{
			Key: string(kv.Key), Token: tokenOf(v.Gen, kv.CreateRevision), Lease: clientv3.LeaseID(kv.Lease),
			Identity: v.Identity, Kind: kind, Mode: mode, Size: semaphoreSize(pk.Tag), Value: v.Value,
			Enqueued: v.enqueued(), Granted: v.stamped(), LockDelay: v.lockDelay(),
		}
		e.Stamped = !e.Granted.IsZero()
		entries = append(entries, e)
	}
	n := holderCount(entries)
	for i := range entries {
		switch {
		case i >= n:
			entries[i].Granted, entries[i].Stamped = time.Time{}, false
		case !entries[i].Stamped:
			entries[i].Granted = entries[i].Enqueued
		}
	}
	if n > 0 {
		st.Holders = entries[:n:n]
		st.Holder = &st.Holders[0]
	}
	if len(entries) > n {
		st.Waiters = entries[n:]
	}
	return st
}

// holderCount says how many of the entries (in grant order) hold.
func holderCount(entries []Entry) int {
	if len(entries) == 0 {
		return 0
	}
	first := entries[0]
	switch first.Kind {
	case kindSemaphore:
		return max(1, min(first.Size, len(entries)))
	case kindRWMutex:
		if first.Mode == "write" {
			return 1
		}
		n := 0
		for n < len(entries) && entries[n].Mode == "read" {
			n++
		}
		return n
	}
	return 1
}

// semaphoreSize returns the size in a semaphore's tag ("s5": 5), else 0.
func semaphoreSize(tag string) int {
	rest, ok := strings.CutPrefix(tag, "s")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// namePrefixOfKey returns the "etcdlock/<escaped>%/" part of a key.
func namePrefixOfKey(key string) string {
	i := strings.Index(key, nameEnd)
	if i < 0 {
		return ""
	}
	return key[:i+len(nameEnd)]
}
