package shard

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcdlock/etcdlock"
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

func TestSlotMapRoundTrip(t *testing.T) {
	m := &slotMap{}
	for s := range m.owner {
		m.owner[s] = []string{"a", "b", "c"}[s*3/NumSlots]
	}
	m.owner[7] = "c"
	got, err := decodeMap(&mvccpb.KeyValue{Value: []byte(m.encode()), ModRevision: 9})
	if err != nil {
		t.Fatal(err)
	}
	if got.owner != m.owner || got.rev != 9 {
		t.Fatal("the map changed through encode and decode")
	}
	if n := len(got.slotsOf("c")); n != 1366 { // 2731..4095, and 7
		t.Fatalf("c has %d slots", n)
	}
	for _, bad := range []string{`{`, `{"ranges":[{"from":5,"to":4,"cluster":"a"}]}`, `{"ranges":[{"from":0,"to":4096,"cluster":"a"}]}`} {
		if _, err := decodeMap(&mvccpb.KeyValue{Value: []byte(bad)}); !errors.Is(err, etcdlock.ErrInvalidArgument) {
			t.Errorf("decodeMap(%s) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func TestStamp(t *testing.T) {
	if st := layout.DecodeStamp(nil); st.Active() || st.Mod != 0 {
		t.Fatal("no stamp reads as active")
	}
	kv := &mvccpb.KeyValue{Value: []byte(layout.Stamp{State: layout.StampActive, Gen: 4}.Encode()), ModRevision: 12}
	if st := layout.DecodeStamp([]*mvccpb.KeyValue{kv}); !st.Active() || st.Gen != 4 || st.Mod != 12 {
		t.Fatalf("decodeStamp = %+v", st)
	}
	kv.Value = []byte(layout.Stamp{State: layout.StampFrozen, Gen: 4, To: "b"}.Encode())
	if st := layout.DecodeStamp([]*mvccpb.KeyValue{kv}); st.Active() || st.To != "b" {
		t.Fatalf("a frozen stamp reads as %+v", st)
	}
}

func TestValidateClusterID(t *testing.T) {
	for id, ok := range map[string]bool{"c0": true, "eu-west.1_a": true, "": false, "a/b": false, "a b": false,
		"0123456789012345678901234567890123456789012345678901234567890123":  true,
		"01234567890123456789012345678901234567890123456789012345678901234": false} {
		if err := validateClusterID(id); (err == nil) != ok {
			t.Errorf("validateClusterID(%q) = %v", id, err)
		}
	}
}

// TestNumSlots: the exported count is the layout's.
func TestNumSlots(t *testing.T) {
	if NumSlots != layout.NumSlots {
		t.Fatalf("NumSlots %d, layout.NumSlots %d", NumSlots, layout.NumSlots)
	}
}
