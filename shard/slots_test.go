package shard

import (
	"testing"

	"github.com/etcdlock/etcdlock/internal/layout"
)

func TestShardKey(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"team-a/jobs/x", "team-a"},
		{"team-a", "team-a"},
		{"orders/{eu}", "eu"},
		{"{eu}/orders", "eu"},
		{"a/{eu}/b/{us}", "eu"},
		{"a/{}/b", "a"},  // empty braces: the first segment
		{"a{b/c", "a{b"}, // no closing brace
		{"/leading", ""}, // an empty first segment is a shard key too
		{"x}{y}", "y"},   // a brace pair after a stray '}'
		{"ünï/cödé", "ünï"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := KeyOf(tc.name); got != tc.want {
				t.Fatalf("KeyOf(%q) = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

// TestSlotOfIsFrozen: the slot of a name is part of the layout; these
// values must never change from one build to the next.
func TestSlotOfIsFrozen(t *testing.T) {
	for name, want := range map[string]int{"billing": 3464, "team-a": 904, "eu": 2926} {
		if got := SlotOf(name); got != want {
			t.Errorf("SlotOf(%q) = %d, want %d (the slot of a name may never change)", name, got, want)
		}
	}
	if SlotOf("orders/{eu}") != SlotOf("eu") || SlotOf("team-a/x") != SlotOf("team-a/y/z") {
		t.Fatal("names with one shard key have different slots")
	}
}

// TestNumSlots: the exported count is the layout's.
func TestNumSlots(t *testing.T) {
	if NumSlots != layout.NumSlots {
		t.Fatalf("NumSlots %d, layout.NumSlots %d", NumSlots, layout.NumSlots)
	}
}
