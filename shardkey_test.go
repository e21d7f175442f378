package etcdlock

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
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
			if got := ShardKey(tc.name); got != tc.want {
				t.Fatalf("ShardKey(%q) = %q, want %q", tc.name, got, tc.want)
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

func TestTokenGeneration(t *testing.T) {
	for _, tc := range []struct{ gen, rev int64 }{{0, 1}, {0, maxRevision}, {1, 1}, {3, 12345}, {maxGeneration, maxRevision}} {
		tok := tokenOf(tc.gen, tc.rev)
		if tok.Generation() != tc.gen || tok.Revision() != tc.rev || tok <= 0 {
			t.Fatalf("tokenOf(%d, %d) = %d: generation %d, revision %d", tc.gen, tc.rev, tok, tok.Generation(), tok.Revision())
		}
	}
	// Any token of a higher generation is above every token of a lower one.
	if tokenOf(2, 1) <= tokenOf(1, maxRevision) {
		t.Fatal("a token of generation 2 is not above generation 1's highest")
	}
	// Tokens of one cluster that is not sharded are its revisions.
	if tokenOf(0, 42) != 42 {
		t.Fatal("generation 0 changes the token")
	}
}

func TestTokenSpace(t *testing.T) {
	for _, tc := range []struct {
		gen, rev int64
		ok       bool
	}{{0, maxRevision + 1, true}, {1, maxRevision, true}, {1, maxRevision + 1, false}} {
		err := checkTokenSpace(tc.gen, tc.rev)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrTokenOverflow)) {
			t.Fatalf("checkTokenSpace(%d, %d) = %v", tc.gen, tc.rev, err)
		}
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
		if _, err := decodeMap(&mvccpb.KeyValue{Value: []byte(bad)}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("decodeMap(%s) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func TestStamp(t *testing.T) {
	if st := decodeStamp(nil); st.active() || st.mod != 0 {
		t.Fatal("no stamp reads as active")
	}
	kv := &mvccpb.KeyValue{Value: []byte(slotStamp{State: stampActive, Gen: 4}.encode()), ModRevision: 12}
	if st := decodeStamp([]*mvccpb.KeyValue{kv}); !st.active() || st.Gen != 4 || st.mod != 12 {
		t.Fatalf("decodeStamp = %+v", st)
	}
	kv.Value = []byte(slotStamp{State: stampFrozen, Gen: 4, To: "b"}.encode())
	if st := decodeStamp([]*mvccpb.KeyValue{kv}); st.active() || st.To != "b" {
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

// TestGrantableRefusesOverflow: no grant of a sharded key whose revision
// would spill into the generation's bits (queue.grant and LockAll both ask
// grantable); a generation-0 key of any revision is granted.
func TestGrantableRefusesOverflow(t *testing.T) {
	s := &Session{shards: &shardSet{}} // live: a sharded session ends only by Close
	for _, tc := range []struct {
		gen, rev int64
		want     error
	}{{1, maxRevision, nil}, {1, maxRevision + 1, ErrTokenOverflow}, {0, maxRevision + 1, nil}} {
		w := &waiter{sk: slotKey{gen: tc.gen}, rev: tc.rev}
		if err := s.grantable(context.Background(), w); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Fatalf("grantable(gen %d, rev %d) = %v, want %v", tc.gen, tc.rev, err, tc.want)
		}
	}
}
