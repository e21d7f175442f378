package layout

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestSlotMapRoundTrip(t *testing.T) {
	m := &SlotMap{}
	for s := range m.Owner {
		m.Owner[s] = []string{"a", "b", "c"}[s*3/NumSlots]
	}
	m.Owner[7] = "c"
	got, err := DecodeMap(&mvccpb.KeyValue{Value: []byte(m.Encode()), ModRevision: 9}, errInvalid)
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != m.Owner || got.Rev != 9 {
		t.Fatal("the map changed through encode and decode")
	}
	if n := len(got.SlotsOf("c")); n != 1366 { // 2731..4095, and 7
		t.Fatalf("c has %d slots", n)
	}
	for _, bad := range []string{`{`, `{"ranges":[{"from":5,"to":4,"cluster":"a"}]}`, `{"ranges":[{"from":0,"to":4096,"cluster":"a"}]}`} {
		if _, err := DecodeMap(&mvccpb.KeyValue{Value: []byte(bad)}, errInvalid); !errors.Is(err, errInvalid) {
			t.Errorf("DecodeMap(%s) = %v, want errInvalid", bad, err)
		}
	}
}

// errInvalid stands for the sentinel a caller passes (package shard's
// etcdlock.ErrInvalidArgument).
var errInvalid = errors.New("invalid")

func TestMoveRecordRoundTrip(t *testing.T) {
	rec := MoveRecord{Epoch: 5, From: "a", To: "b", At: 1700000000000, Owner: "op"}
	kv := &mvccpb.KeyValue{Key: []byte(MoveKey(42)), Value: []byte(rec.Encode()), CreateRevision: 11}
	slot, got, ok := DecodeMove(kv)
	if want := (MoveRecord{Epoch: 11, From: "a", To: "b", At: 1700000000000, Owner: "op"}); !ok || slot != 42 || got != want {
		t.Fatalf("DecodeMove = %d, %+v, %v", slot, got, ok)
	}
	for _, bad := range []*mvccpb.KeyValue{
		{Key: []byte(MoveKeyPrefix + "x"), Value: kv.Value},
		{Key: []byte(MoveKey(NumSlots)), Value: kv.Value},
		{Key: kv.Key, Value: []byte("{")},
	} {
		if _, _, ok := DecodeMove(bad); ok {
			t.Errorf("DecodeMove(%s = %s) is ok", bad.Key, bad.Value)
		}
	}
}

func TestStamp(t *testing.T) {
	if st := DecodeStamp(nil); st.Active() || st.Mod != 0 {
		t.Fatal("no stamp reads as active")
	}
	kv := &mvccpb.KeyValue{Value: []byte(Stamp{State: StampActive, Gen: 4}.Encode()), ModRevision: 12}
	if st := DecodeStamp([]*mvccpb.KeyValue{kv}); !st.Active() || st.Gen != 4 || st.Mod != 12 {
		t.Fatalf("decodeStamp = %+v", st)
	}
	kv.Value = []byte(Stamp{State: StampFrozen, Gen: 4, To: "b"}.Encode())
	if st := DecodeStamp([]*mvccpb.KeyValue{kv}); st.Active() || st.To != "b" {
		t.Fatalf("a frozen stamp reads as %+v", st)
	}
}
