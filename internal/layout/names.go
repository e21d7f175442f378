package layout

// The name keys, frozen like the rest (package etcdlock's keys.go has the
// whole table): what package shard's move also reads and writes.
//
//	etcdlock/<escaped name>%/<kind tag>/<id>  the name's queue keys
//	etcdlock/<escaped name>%!/<lease hex>    a session's barrier
//	etcdlock/<escaped name>%!done            the name's completion record
//	etcdlock/<escaped name>%!broken          the name's break marker
//
// Escaping percent-encodes '%', bytes 0x00-0x1f and 0x7f and leaves every
// other byte as it is, so an escaped name never contains "%/" or "%!".

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// KeyRoot is the prefix of every key of a name.
	KeyRoot = "etcdlock/"
	// NameEnd ends the escaped name in its queue keys.
	NameEnd = "%/"
	// BrokenSuffix ends a name's break marker key:
	// "etcdlock/<escaped name>%!broken", outside the queue's range
	// "<escaped name>%/" (an escaped name never contains "%!"), so no
	// queue read or watch sees it.
	BrokenSuffix = "%!broken"
	// BarrierEnd ends the escaped name in its sessions' barrier keys
	// (and their pass records): "etcdlock/<escaped name>%!/...". An
	// escaped name never contains "%/" nor "%!/", so no queue read sees
	// a barrier, and ListPrefix covers it.
	BarrierEnd = "%!/"
	// MaxNameBytes is the longest name, in bytes.
	MaxNameBytes = 1024
)

// ValidateName checks a lock name: non-empty, valid UTF-8, at most
// MaxNameBytes bytes. Its error wraps invalid (package etcdlock passes its
// ErrInvalidName, and so do the CLI's checks).
func ValidateName(name string, invalid error) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", invalid)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: name of %d bytes is longer than %d", invalid, len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name %q is not valid UTF-8", invalid, name)
	}
	return nil
}

func needsEscape(c byte) bool { return c == '%' || c < 0x20 || c == 0x7f }

// EscapeName percent-encodes '%', 0x00-0x1f and 0x7f (upper-case hex).
func EscapeName(name string) string {
	i := 0
	for i < len(name) && !needsEscape(name[i]) {
		i++
	}
	if i == len(name) {
		return name
	}
	var b strings.Builder
	b.Grow(len(name))
	b.WriteString(name[:i]) // the prefix that needs no escaping
	for ; i < len(name); i++ {
		c := name[i]
		if needsEscape(c) {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// UnescapeName reverses EscapeName.
func UnescapeName(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// NamePrefix is the key prefix of every queue key of one name:
// "etcdlock/<escaped>%/".
func NamePrefix(name string) string { return KeyRoot + EscapeName(name) + NameEnd }

// ListPrefix is the key prefix under which every name that starts with
// prefix lives: "etcdlock/" + the escaped prefix. A role with readwrite on
// it may use every name under prefix and no other.
func ListPrefix(prefix string) string { return KeyRoot + EscapeName(prefix) }

// BarrierPrefix is the key prefix of the barrier keys of name (and of the
// pass records of its lock-delays): "etcdlock/<escaped>%!/".
func BarrierPrefix(name string) string { return KeyRoot + EscapeName(name) + BarrierEnd }

// CompletionKey is the completion record of name:
// "etcdlock/<escaped>%!done". It is outside the queue's range
// "etcdlock/<escaped>%/" (an escaped name never contains "%!"), so no
// queue read, watch, Describe or List sees it, and it has no lease: it
// outlives the sessions that wrote it.
func CompletionKey(name string) string { return KeyRoot + EscapeName(name) + "%!done" }

// QueueKey is a queue key split along the layout.
type QueueKey struct {
	Name string // unescaped lock name
	Tag  string // kind tag
	ID   string // waiter id
}

// ParseKey splits a queue key; ok is false for any other key: barriers,
// completion records, break markers, keys of other programs.
func ParseKey(key string) (QueueKey, bool) {
	rest, ok := strings.CutPrefix(key, KeyRoot)
	if !ok {
		return QueueKey{}, false
	}
	esc, rest, ok := strings.Cut(rest, NameEnd)
	if !ok {
		return QueueKey{}, false
	}
	tag, id, ok := strings.Cut(rest, "/")
	if !ok || tag == "" || id == "" {
		return QueueKey{}, false
	}
	name, ok := UnescapeName(esc)
	if !ok {
		return QueueKey{}, false
	}
	return QueueKey{Name: name, Tag: tag, ID: id}, true
}

// NameOfKey returns the name whose queue key is key, and true; false for
// any other key (see ParseKey).
func NameOfKey(key string) (string, bool) {
	k, ok := ParseKey(key)
	return k.Name, ok
}

// SessionOfKey reports whether key is a session's barrier key of a name,
// and if so, the name and the session's lease. Every session has one in
// each name it holds or waits in, from its first key there until its
// lease ends, when etcd deletes the barrier together with the session's
// remaining keys, at one revision. So a watcher that sees a queue key of
// lease L deleted at revision D tells its end: at D the barrier of L went
// too (the lease ended: expired or revoked), or it stayed (the key was
// released, or broken: see BrokenOf). Keys of sessions of versions before
// barriers have none until they give up a write.
func SessionOfKey(key string) (name string, lease clientv3.LeaseID, ok bool) {
	rest, ok := strings.CutPrefix(key, KeyRoot)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndex(rest, BarrierEnd)
	if i < 0 {
		return "", 0, false
	}
	name, ok = UnescapeName(rest[:i])
	id, err := strconv.ParseUint(rest[i+len(BarrierEnd):], 16, 63)
	if !ok || err != nil || id == 0 {
		return "", 0, false
	}
	return name, clientv3.LeaseID(id), true
}

// BrokenValue is the JSON value of a break marker.
type BrokenValue struct {
	V     int   `json:"v"`
	Token int64 `json:"token"`
	At    int64 `json:"at"` // unix milliseconds
}

// Broken is what a name's break marker says: Break deleted the key of
// the grant of Token at the marker's revision. Break writes it in the transaction of its delete,
// so a watcher of the name's keys sees the deletion and the marker at one
// revision, and a key deleted without one was released or went with its
// lease (see SessionOfKey). The marker is attached to the broken holder's
// lease, so it goes when that session ends.
type Broken struct {
	Name  string
	Token int64     // the broken grant's token
	At    time.Time // when, by the breaking client's clock (millisecond precision)
}

// BrokenOf returns the break marker kv holds; ok is false when kv is not
// one.
func BrokenOf(kv *mvccpb.KeyValue) (b Broken, ok bool) {
	rest, ok := strings.CutPrefix(string(kv.Key), KeyRoot)
	if !ok {
		return Broken{}, false
	}
	escaped, ok := strings.CutSuffix(rest, BrokenSuffix)
	if !ok {
		return Broken{}, false
	}
	name, ok := UnescapeName(escaped)
	var v BrokenValue
	if !ok || json.Unmarshal(kv.Value, &v) != nil || v.V != 1 {
		return Broken{}, false
	}
	return Broken{Name: name, Token: v.Token, At: time.UnixMilli(v.At)}, true
}

// BrokenOp is the break marker's write for the queue key key of create
// revision rev, attached to lease (the broken holder's).
func BrokenOp(key string, rev int64, lease clientv3.LeaseID) clientv3.Op {
	dir := key[:strings.Index(key, NameEnd)]
	b, _ := json.Marshal(BrokenValue{V: 1, Token: rev, At: time.Now().UnixMilli()}) // cannot fail
	return clientv3.OpPut(dir+BrokenSuffix, string(b), clientv3.WithLease(lease))
}
