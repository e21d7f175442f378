package etcdlock

// This file holds the arithmetic of sharding (DESIGN.md, "More than one
// cluster"): which slot a name lives in, and how a token carries the
// generation of the cluster that granted it.

import (
	"fmt"
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
	// MaxRevision is the highest create revision a sharded grant's token can
	// carry; a sharded grant at a higher revision is refused (ErrTokenOverflow).
	MaxRevision = 1<<GenerationShift - 1
	// maxGeneration keeps generation<<GenerationShift positive in an int64.
	maxGeneration = 1<<(63-GenerationShift) - 1
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

// tokenOf returns the token of a key created at rev under generation gen.
// Generation 0 (one cluster, no sharding) is the create revision itself.
func tokenOf(gen, rev int64) Token { return Token(gen<<GenerationShift | rev) }

// Generation returns the generation part of the token: 0 for a token of a
// cluster that is not sharded, else the generation of the cluster that
// granted it when it granted it.
func (t Token) Generation() int64 { return int64(t) >> GenerationShift }

// Revision returns the create revision part of the token: the create
// revision of the grant's key in its cluster (what Lock.Guard compares).
func (t Token) Revision() int64 { return int64(t) & MaxRevision }

// checkTokenSpace refuses a sharded grant whose revision would spill into
// the generation bits.
func checkTokenSpace(gen, rev int64) error {
	if gen > 0 && rev > MaxRevision {
		return fmt.Errorf("%w: revision %d is past %d, the most a sharded token carries; move this cluster's slots to a fresh cluster", ErrTokenOverflow, rev, int64(MaxRevision))
	}
	return nil
}
