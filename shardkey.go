package etcdlock

// This file holds which slot a name lives in (DESIGN.md, "More than one
// cluster").

import (
	"hash/crc32"
	"strings"
)

const (
	// NumSlots is the number of slots names are hashed into; a slot is the
	// unit that lives on one cluster and moves between clusters.
	NumSlots = 4096
	// maxGeneration keeps generation<<generationShift positive in an int64.
	maxGeneration = 1<<(63-generationShift) - 1
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
