package layout

// The name keys, frozen like the rest (package etcdlock's keys.go has the
// whole table): what package shard's move also reads and writes.
//
//	etcdlock/<escaped name>%/...             the name's queue keys
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
)

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

// OnceKey is the completion record of name: "etcdlock/<escaped>%!done".
func OnceKey(name string) string { return KeyRoot + EscapeName(name) + "%!done" }

// BrokenValue is the JSON value of a break marker.
type BrokenValue struct {
	V     int   `json:"v"`
	Token int64 `json:"token"`
	At    int64 `json:"at"` // unix milliseconds
}

// BrokenOp is the break marker's write for the queue key key of create
// revision rev, attached to lease (the broken holder's).
func BrokenOp(key string, rev int64, lease clientv3.LeaseID) clientv3.Op {
	dir := key[:strings.Index(key, NameEnd)]
	b, _ := json.Marshal(BrokenValue{V: 1, Token: rev, At: time.Now().UnixMilli()}) // cannot fail
	return clientv3.OpPut(dir+BrokenSuffix, string(b), clientv3.WithLease(lease))
}
