package etcdlock

// This file holds the whole key layout, which is frozen: two builds of the
// library, or the library and the CLI, must agree on it byte for byte.
//
//	etcdlock/<escaped name>%/<kind tag>/<lease hex>-<waiter id hex>   a queue key
//	etcdlock/<escaped name>%!/<lease hex>    a session's barrier (barrier.go says why)
//	etcdlock/<escaped name>%!/p/<kind tag>/<lease hex>-<waiter id hex>   a pass record (lockdelay_record.go)
//	etcdlock/<escaped name>%!done            the name's completion record (once.go)
//	etcdlock/<escaped name>%!broken          the name's break marker (break.go)
//
// Escaping percent-encodes '%', bytes 0x00-0x1f and 0x7f and leaves every
// other byte as it is, so an escaped name never contains "%/" and no name's
// key range contains another's.

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/layout"
)

const (
	keyRoot = layout.KeyRoot
	nameEnd = layout.NameEnd

	tagMutex    = "m"
	tagElection = "e"
	tagReader   = "r"
	tagWriter   = "w"
)

// Kind names as they appear in Entry.Kind.
const (
	kindMutex     = "mutex"
	kindElection  = "election"
	kindSemaphore = "semaphore"
	kindRWMutex   = "rwmutex"
)

// validateName checks a lock name: non-empty, valid UTF-8, at most 1024
// bytes; its error wraps ErrInvalidName.
func validateName(name string) error { return layout.ValidateName(name, ErrInvalidName) }

// namePrefix is the key prefix of every key of one name: "etcdlock/<escaped>%/".
func namePrefix(name string) string { return layout.NamePrefix(name) }

// listPrefix is the key prefix under which every name starting with prefix lives.
func listPrefix(prefix string) string { return layout.ListPrefix(prefix) }

// waiterKey returns the key of a session's acquisition that holds slot in
// queue dir: "<dir><tag>/<lease hex>-<slot hex>". A slot is reused only once
// its previous key is certainly gone (see keyBook.takeSlot), and watchers
// ignore events older than their own key, so no old event of a reused name
// is ever taken for a new one.
func waiterKey(dir, tag string, lease clientv3.LeaseID, slot int) string {
	return dir + tag + "/" + strconv.FormatInt(int64(lease), 16) + "-" + strconv.FormatInt(int64(slot), 16)
}

// tagOf returns the kind tag of a key below dir, "" if it has none.
func tagOf(dir, key string) string {
	rest, ok := strings.CutPrefix(key, dir)
	if !ok {
		return ""
	}
	tag, _, _ := strings.Cut(rest, "/")
	return tag
}

// kindOfTag maps a kind tag to its Entry.Kind and Entry.Mode.
func kindOfTag(tag string) (kind, mode string) {
	switch {
	case tag == tagMutex:
		return kindMutex, ""
	case tag == tagElection:
		return kindElection, ""
	case tag == tagReader:
		return kindRWMutex, "read"
	case tag == tagWriter:
		return kindRWMutex, "write"
	case strings.HasPrefix(tag, "s"):
		return kindSemaphore, ""
	}
	return "unknown", ""
}

// exclusiveTag reports whether a grant of tag has one holder at a time: a
// mutex, an election, a writer or a semaphore of one.
func exclusiveTag(tag string) bool {
	switch tag {
	case tagMutex, tagElection, tagWriter, "s1":
		return true
	}
	return false
}

// tagsCompatible reports whether keys with tags a and b may share a queue.
func tagsCompatible(a, b string) bool {
	if a == b {
		return true
	}
	ka, _ := kindOfTag(a)
	kb, _ := kindOfTag(b)
	return ka == kindRWMutex && kb == kindRWMutex
}

// keyValue is the JSON value stored with every key. At is when the key
// entered the queue, and Granted when it was granted after a wait (its
// grant stamp, see waiter.stamp), in milliseconds since the Unix epoch by
// the writing client's clock; keys of older versions have neither, and a
// key granted as it entered the queue has no stamp. Delay is the session's
// lock-delay in milliseconds (WithLockDelay), left out when zero. Pass is
// a lock-delay a waiter that gave up passes on to the waiter behind it: the
// delay's end, in milliseconds since the Unix epoch by the writer's clock,
// written into the key just before its delete (lockdelay.go); only such a
// waiter writes it, and older readers ignore it. Value is left out when
// empty. Every byte here is written to every member's log and database
// with every grant, so the value stays small.
type keyValue struct {
	V        int    `json:"v"`
	Identity string `json:"identity"`
	Value    string `json:"value,omitempty"`
	At       int64  `json:"at,omitempty"`
	Granted  int64  `json:"granted,omitempty"`
	Delay    int64  `json:"delay,omitempty"`
	Pass     int64  `json:"pass,omitempty"`
	// Gen is the generation of the slot the key was created under (0: a
	// cluster that is not sharded); its token is Gen<<generationShift |
	// its create revision.
	Gen int64 `json:"gen,omitempty"`
}

// encodeValue returns the stored form of a key's value; a zero granted is
// left out.
func encodeValue(identity, value string, at, granted time.Time, delay time.Duration, gen int64) string {
	kv := keyValue{V: 1, Identity: identity, Value: value, At: at.UnixMilli(), Delay: delay.Milliseconds(), Gen: gen}
	if !granted.IsZero() {
		kv.Granted = granted.UnixMilli()
	}
	return kv.encode()
}

func (v keyValue) encode() string {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen for two strings
		return `{"v":1}`
	}
	return string(b)
}

// enqueued returns when the key entered the queue (zero if unknown).
func (v keyValue) enqueued() time.Time { return unixMilli(v.At) }

// lockDelay returns the lock-delay of the key's session (0 if none).
func (v keyValue) lockDelay() time.Duration { return time.Duration(max(v.Delay, 0)) * time.Millisecond }

// passed returns the end of the lock-delay passed on in the key (zero if
// none).
func (v keyValue) passed() time.Time { return unixMilli(v.Pass) }

// stamped returns the key's grant stamp (zero if it has none).
func (v keyValue) stamped() time.Time { return unixMilli(v.Granted) }

func unixMilli(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// keyToken returns the fencing token of a queue key as read from etcd.
func keyToken(kv *mvccpb.KeyValue) Token {
	return tokenOf(decodeValue(kv.Value).Gen, kv.CreateRevision)
}

func decodeValue(b []byte) keyValue {
	var v keyValue
	if err := json.Unmarshal(b, &v); err != nil {
		return keyValue{}
	}
	return v
}

// barrierEnd separates an escaped name from the barrier keys of its sessions.
// An escaped name never contains "%/" (nor does "%!/"), so no queue read and
// no List or Describe sees a barrier, and a role on a name prefix covers it.
const barrierEnd = layout.BarrierEnd

// barrierKey returns the barrier of the session with lease in queue dir
// (namePrefix(name)).
func barrierKey(dir string, lease clientv3.LeaseID) string {
	return dir[:len(dir)-len(nameEnd)] + barrierEnd + strconv.FormatInt(int64(lease), 16)
}

// completionKey is the completion record of name: "etcdlock/<escaped>%!done"
// (layout.CompletionKey says why no queue read sees it).
func completionKey(name string) string { return layout.CompletionKey(name) }
