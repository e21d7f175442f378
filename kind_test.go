package etcdlock

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestCheckKind: every key read ahead counts, whatever its place.
func TestCheckKind(t *testing.T) {
	t.Parallel()
	dir := namePrefix("x")
	kv := func(tag string) *mvccpb.KeyValue { return &mvccpb.KeyValue{Key: []byte(dir + tag + "/1-0")} }
	for _, tc := range []struct {
		name  string
		tag   string
		ahead []*mvccpb.KeyValue
		ok    bool
	}{
		{"empty", "s5", nil, true},
		{"same size", "s5", []*mvccpb.KeyValue{kv("s5"), kv("s5")}, true},
		{"mutex behind a stray", "s5", []*mvccpb.KeyValue{kv("s5"), kv("m")}, false},
		{"other size far back", "s5", []*mvccpb.KeyValue{kv("s5"), kv("s5"), kv("s1")}, false},
		{"readers and writers", "r", []*mvccpb.KeyValue{kv("w"), kv("r")}, true},
		{"election behind a mutex", "e", []*mvccpb.KeyValue{kv("m")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := queue{dir: dir, tag: tc.tag}.checkKind(tc.ahead)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrKindMismatch)) {
				t.Fatalf("checkKind = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
