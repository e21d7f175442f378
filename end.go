package etcdlock

// This file holds a name's end marker: the write that says why a queue key
// went, in the same etcd transaction as its deletion.

import (
	"encoding/json"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// How a queue key ended, as End.How.
const (
	// EndReleased: the key's own session deleted it: Unlock, Resign, a
	// failed or canceled acquisition's cleanup, Session.Close.
	EndReleased = "released"
	// EndBroken: Break deleted it.
	EndBroken = "broken"
)

// endSuffix ends a name's end marker key: "etcdlock/<escaped name>%!end",
// outside the queue's range "<escaped name>%/" (an escaped name never
// contains "%!"), so no queue read or watch sees it.
const endSuffix = "%!end"

// End is what a name's end marker says: which key of the name ended, and
// how. Every deletion of a queue key by etcdlock (its session's, or Break's)
// writes the marker in the same etcd transaction, so a watcher of the name's
// keys sees the deletion and the marker at one revision. A key deleted at a
// revision that wrote no marker for its token went with its lease (its TTL
// ran out, or it was revoked), or was deleted by hand. A marker of a
// release lives with the releasing session's lease; a marker of a break has
// none and stays until the name's next release overwrites it.
type End struct {
	Name     string
	Token    Token     // the token (create revision) of the key that ended
	How      string    // EndReleased or EndBroken
	Identity string    // of the releasing session; "" for a break
	At       time.Time // when, by the writer's clock (millisecond precision)
}

// endValue is the JSON value of an end marker.
type endValue struct {
	V        int    `json:"v"`
	Token    int64  `json:"token"`
	How      string `json:"how"`
	Identity string `json:"identity,omitempty"`
	At       int64  `json:"at"` // unix milliseconds
}

// EndOf returns the end marker kv holds; ok is false when kv is not one.
func EndOf(kv *mvccpb.KeyValue) (e End, ok bool) {
	rest, ok := strings.CutPrefix(string(kv.Key), keyRoot)
	if !ok {
		return End{}, false
	}
	escaped, ok := strings.CutSuffix(rest, endSuffix)
	if !ok {
		return End{}, false
	}
	name, ok := unescapeName(escaped)
	var v endValue
	if !ok || json.Unmarshal(kv.Value, &v) != nil || v.V != 1 {
		return End{}, false
	}
	return End{Name: name, Token: Token(v.Token), How: v.How, Identity: v.Identity, At: time.UnixMilli(v.At)}, true
}

// endOp is the end marker's write for the queue key key of create revision
// rev, ended how by identity; lease is the marker's (0: none).
func endOp(key string, rev int64, how, identity string, lease clientv3.LeaseID) clientv3.Op {
	dir := key[:strings.LastIndex(key, nameEnd)]
	b, _ := json.Marshal(endValue{V: 1, Token: rev, How: how, Identity: identity, At: time.Now().UnixMilli()}) // cannot fail
	if lease == clientv3.NoLease {
		return clientv3.OpPut(dir+endSuffix, string(b))
	}
	return clientv3.OpPut(dir+endSuffix, string(b), clientv3.WithLease(lease))
}

// released is the end marker's write for a key of s that s deletes.
func (s *Session) released(key string, rev int64) clientv3.Op {
	return endOp(key, rev, EndReleased, s.identity, s.lease)
}
