package shard

// This file holds which slot a name lives in (DESIGN.md, "More than one
// cluster"). The arithmetic is the core's too (its stamp guard compares
// the stamp of a name's slot): both read it from internal/layout.

import "github.com/etcdlock/etcdlock/internal/layout"

// NumSlots is the number of slots names are hashed into; a slot is the unit
// that lives on one cluster and moves between clusters.
const NumSlots = 4096 // layout.NumSlots (TestNumSlots)

// KeyOf returns the part of name that decides its slot: the text inside
// the first "{...}" when name has one with something inside, else the name
// up to its first "/" (all of it when it has none). So "team-a/jobs/x" and
// "team-a/db" share a slot, as do "orders/{eu}" and "invoices/{eu}".
func KeyOf(name string) string { return layout.ShardKey(name) }

// SlotOf returns the slot of name: CRC-32 (Castagnoli) of KeyOf(name) mod
// NumSlots. Every build of etcdlock computes the same slot.
func SlotOf(name string) int { return layout.SlotOf(name) }
