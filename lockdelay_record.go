package etcdlock

// This file holds the pass record: the end of a lock-delay that a waiter
// holds off for, written beside its key as the hold-off starts, so that it
// outlives the key. The waiter behind that learns of the key's deletion only
// by a read (a compaction hid the deletion, or the key went before its watch
// began), and so never saw the value that carried the delay, finds it there
// (DESIGN.md, "Lock-delay").
//
//	etcdlock/<escaped name>%!/p/<kind tag>/<lease hex>-<waiter id hex>
//
// It sits in the name's barrier range (so a role that may use the name may
// write it; "p/…" is never a lease, so a reader of barriers does not take it for a
// barrier), outside the queue's range, and it is attached to a lease of its
// own that ends a little after the delay: it cleans itself up, and no delete
// is ever sent for it.

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// passTag starts a pass record's key after the name's barrierEnd.
const passTag = "p/"

// passKey returns the pass record of queue key key.
func passKey(key string) string {
	i := strings.Index(key, nameEnd) // an escaped name never contains "%/"
	return key[:i] + barrierEnd + passTag + key[i+len(nameEnd):]
}

// passPrefix returns the prefix of the pass records of queue dir
// (namePrefix(name)).
func passPrefix(dir string) string {
	return dir[:len(dir)-len(nameEnd)] + barrierEnd + passTag
}

// passRecord is a pass record's value: the create revision of the key it
// belongs to (a key name is reused by a later key of the same session and
// slot) and the delay's end, in milliseconds since the Unix epoch by the
// writer's clock.
type passRecord struct {
	V    int   `json:"v"`
	Rev  int64 `json:"rev"`
	Pass int64 `json:"pass"`
}

// passMillis returns end in milliseconds since the Unix epoch, rounded up
// (a delay passed on never ends earlier).
func passMillis(end time.Time) int64 {
	return (end.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// passRecords returns the pass records among records by their keys
// (passKey of the queue key each belongs to), nil if none.
func passRecords(records []*mvccpb.KeyValue) map[string]passRecord {
	if len(records) == 0 {
		return nil
	}
	out := make(map[string]passRecord, len(records))
	for _, kv := range records {
		var r passRecord
		if json.Unmarshal(kv.Value, &r) == nil {
			out[string(kv.Key)] = r
		}
	}
	return out
}

// recordedPass returns the end of the delay that h's key passed on in its
// pass record among records (passRecords), zero if none.
func recordedPass(records map[string]passRecord, h heldOff) time.Time {
	if len(records) == 0 {
		return time.Time{}
	}
	if r, ok := records[passKey(h.key)]; ok && r.Rev == h.create {
		return unixMilli(r.Pass)
	}
	return time.Time{}
}

// passRecordTTL is how long a pass record of a delay that ends at end
// lives: a whole second past the end, so etcd deletes it only after the
// delay is over (a leader change only lengthens a lease).
func passRecordTTL(end time.Time) int64 {
	return int64(time.Until(end)/time.Second) + 2
}

// passOn writes it.pass (the key's value with the delay passed on) into
// its key, and the key's pass record, in one Txn guarded by the key's
// create revision (so never into a later key of the name): the waiter
// behind sees the key's deletion with that value, or, if it learns of the
// deletion only by a read, finds the record. It returns the write's
// revision, 0 when the key was gone. The record's own lease (one Grant) is
// left to run out when the key was gone.
func (b *keyBook) passOn(ctx context.Context, it *reapItem) (int64, error) {
	actx, cancel := context.WithTimeout(ctx, wire.AttemptTimeout)
	defer cancel()
	lease, err := b.s.cli.Grant(actx, passRecordTTL(it.passUntil))
	if err != nil {
		return 0, err
	}
	rec, _ := json.Marshal(passRecord{V: 1, Rev: it.rev, Pass: passMillis(it.passUntil)}) // cannot fail
	resp, err := b.s.cli.Txn(actx).
		If(clientv3.Compare(clientv3.CreateRevision(it.key), "=", it.rev)).
		Then(clientv3.OpPut(it.key, it.pass, clientv3.WithIgnoreLease()),
			clientv3.OpPut(passKey(it.key), string(rec), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil || !resp.Succeeded {
		return 0, err
	}
	return resp.Header.Revision, nil
}
