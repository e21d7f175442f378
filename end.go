package etcdlock

// This file holds how a watcher of a name tells why a queue key went: a
// break's marker, written with the deletion, and the sessions' barrier keys,
// which go with their leases.

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/layout"
)

// Broken is what a name's break marker says: Break deleted the key of Token
// at the marker's revision. Break writes it in the transaction of its
// delete, so a watcher of the name's keys sees the deletion and the marker
// at one revision, and a key deleted without one was released or went with
// its lease (see SessionOfKey). The marker is attached to the broken
// holder's lease (Break leaves that lease alone), so it goes when that
// session ends.
type Broken struct {
	Name  string
	Token Token     // the broken grant's token
	At    time.Time // when, by the breaking client's clock (millisecond precision)
}

// BrokenOf returns the break marker kv holds; ok is false when kv is not
// one.
func BrokenOf(kv *mvccpb.KeyValue) (b Broken, ok bool) {
	rest, ok := strings.CutPrefix(string(kv.Key), keyRoot)
	if !ok {
		return Broken{}, false
	}
	escaped, ok := strings.CutSuffix(rest, layout.BrokenSuffix)
	if !ok {
		return Broken{}, false
	}
	name, ok := layout.UnescapeName(escaped)
	var v layout.BrokenValue
	if !ok || json.Unmarshal(kv.Value, &v) != nil || v.V != 1 {
		return Broken{}, false
	}
	return Broken{Name: name, Token: Token(v.Token), At: time.UnixMilli(v.At)}, true
}

// SessionOfKey reports whether key is a session's barrier key of a name
// (see BarrierPrefix), and if so, the name and the session's lease. Every
// session has one in each name it holds or waits in, from its first key
// there until its lease ends, when etcd deletes the barrier together with
// the session's remaining keys, at one revision. So a watcher that sees a
// queue key of lease L deleted at revision D tells its end: at D the barrier
// of L went too (the lease ended: expired or revoked), or it stayed (the
// key was released, or broken: see BrokenOf). Keys of sessions of versions
// before this have no barrier until they give up a write.
func SessionOfKey(key string) (name string, lease clientv3.LeaseID, ok bool) {
	rest, ok := strings.CutPrefix(key, keyRoot)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndex(rest, barrierEnd)
	if i < 0 {
		return "", 0, false
	}
	name, ok = layout.UnescapeName(rest[:i])
	id, err := strconv.ParseUint(rest[i+len(barrierEnd):], 16, 63)
	if !ok || err != nil || id == 0 {
		return "", 0, false
	}
	return name, clientv3.LeaseID(id), true
}
