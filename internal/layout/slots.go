// Package layout holds the frozen key layout of sharding that both package
// etcdlock (the stamp guard inside its enqueue Txn, the member check of
// NewSession) and package shard (the map, the admin calls, the move) read
// and write: the shard keys, which slot a name lives in, a slot's stamp,
// and the generation's place in a token; and the root's slot map and move
// records, which package shard alone reads. Every build must agree on it
// (DESIGN.md, "More than one cluster"). Being internal, it is no part of
// the public API.
package layout

import (
	"hash/crc32"
	"strings"
)

const (
	// NumSlots is the number of slots names are hashed into; a slot is the
	// unit that lives on one cluster and moves between clusters.
	NumSlots = 4096
	// GenerationShift is where a token's generation starts: a token is
	// generation<<GenerationShift | create revision.
	GenerationShift = 44
	// MaxRevision is the highest create revision a sharded token carries.
	MaxRevision = 1<<GenerationShift - 1
	// MaxGeneration keeps generation<<GenerationShift positive in an int64.
	MaxGeneration = 1<<(63-GenerationShift) - 1
)

// ShardKey returns the part of name that decides its slot: the text inside
// the first "{...}" when name has one with something inside, else the name
// up to its first "/" (all of it when it has none). So "team-a/jobs/x" and
// "team-a/db" share a slot, as do "orders/{eu}" and "invoices/{eu}".
func ShardKey(name string) string {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			return name[i+1 : i+1+j]
		}
	}
	if i := strings.IndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return name
}

// SlotOf returns the slot of name: CRC-32 (Castagnoli) of ShardKey(name)
// mod NumSlots. Every build of etcdlock computes the same slot.
func SlotOf(name string) int {
	return int(crc32.Checksum([]byte(ShardKey(name)), castagnoli) % NumSlots)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
