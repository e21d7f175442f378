package etcdlock

// This file holds the arithmetic of a Token (fence.go): on a sharded
// session (package shard) a token carries the generation of the cluster
// that granted it above bit generationShift, and the key's create revision
// below it (DESIGN.md, "More than one cluster").

import (
	"fmt"

	"github.com/etcdlock/etcdlock/internal/layout"
)

const (
	// generationShift is where a token's generation starts: a token is
	// generation<<generationShift | create revision.
	generationShift = layout.GenerationShift
	// maxRevision is the highest create revision a sharded grant's token
	// can carry; a sharded grant at a higher revision is refused
	// (ErrTokenOverflow).
	maxRevision = 1<<generationShift - 1
)

// tokenOf returns the token of a key created at rev under generation gen.
// Generation 0 (one cluster, no sharding) is the create revision itself.
func tokenOf(gen, rev int64) Token { return Token(gen<<generationShift | rev) }

// Generation returns the generation part of the token: 0 for a token of a
// cluster that is not sharded, else the generation of the cluster that
// granted it when it granted it.
func (t Token) Generation() int64 { return int64(t) >> generationShift }

// Revision returns the create revision part of the token: the create
// revision of the grant's key in its cluster (what Lock.Guard compares).
func (t Token) Revision() int64 { return int64(t) & maxRevision }

// checkTokenSpace refuses a sharded grant whose revision would spill into
// the generation bits.
func checkTokenSpace(gen, rev int64) error {
	if gen > 0 && rev > maxRevision {
		return fmt.Errorf("%w: revision %d is past %d, the most a sharded token carries; move this cluster's slots to a fresh cluster", ErrTokenOverflow, rev, int64(maxRevision))
	}
	return nil
}
