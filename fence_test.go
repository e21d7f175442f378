package etcdlock_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/etcdlock/etcdlock"
)

func TestFence(t *testing.T) {
	var f etcdlock.Fence
	steps := []struct {
		op      string
		tok     etcdlock.Token
		wantErr bool
		highest etcdlock.Token
	}{
		{"admit", 0, true, 0},
		{"admit", -3, true, 0},
		{"admit", 5, false, 5},
		{"admit", 5, false, 5}, // the same holder again
		{"admit", 4, true, 5},
		{"shared", 5, false, 5},
		{"shared", 9, false, 5}, // shared grants do not raise the bar
		{"shared", 4, true, 5},
		{"shared", 0, true, 5},
		{"admit", 9, false, 9},
		{"shared", 5, true, 9},
	}
	for i, st := range steps {
		var err error
		if st.op == "admit" {
			err = f.Admit(st.tok)
		} else {
			err = f.AdmitShared(st.tok)
		}
		if (err != nil) != st.wantErr || (err != nil && !errors.Is(err, etcdlock.ErrStaleToken)) {
			t.Fatalf("step %d: %s(%d) = %v, want error %v", i, st.op, st.tok, err, st.wantErr)
		}
		if f.Highest() != st.highest {
			t.Fatalf("step %d: highest %d, want %d", i, f.Highest(), st.highest)
		}
	}
}

// TestFenceSharedMark checks that a shared token admitted by AdmitShared
// fences an older writer: a writer paused past its lease must not be admitted
// after a later reader (docs/guarantees.md's promise that a resource never accepts an
// older holder's read or write), while readers holding together still admit
// each other in any order.
func TestFenceSharedMark(t *testing.T) {
	t.Parallel()
	type step struct {
		op      string // "admit" or "shared"
		tok     etcdlock.Token
		wantErr bool
	}
	for _, tc := range []struct {
		name          string
		steps         []step
		highest, shrd etcdlock.Token
	}{
		{"stale writer after a newer reader", []step{
			{"admit", 5, false}, {"shared", 7, false}, {"admit", 5, true},
		}, 5, 7},
		{"older writer first seen after a reader", []step{
			{"shared", 7, false}, {"admit", 6, true},
		}, 0, 7},
		{"newer writer after readers", []step{
			{"shared", 7, false}, {"shared", 8, false}, {"admit", 9, false}, {"shared", 8, true},
		}, 9, 8},
		{"concurrent readers in any order", []step{
			{"admit", 3, false}, {"shared", 8, false}, {"shared", 6, false}, {"shared", 8, false}, {"admit", 7, true},
		}, 3, 8},
		{"same writer again after a reader it precedes", []step{
			{"admit", 4, false}, {"admit", 4, false}, {"shared", 5, false}, {"admit", 4, true}, {"admit", 5, false},
		}, 5, 5},
		{"refused tokens record nothing", []step{
			{"admit", 9, false}, {"shared", 4, true}, {"shared", 0, true}, {"admit", -1, true},
		}, 9, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var f etcdlock.Fence
			for i, st := range tc.steps {
				var err error
				if st.op == "admit" {
					err = f.Admit(st.tok)
				} else {
					err = f.AdmitShared(st.tok)
				}
				if (err != nil) != st.wantErr || (err != nil && !errors.Is(err, etcdlock.ErrStaleToken)) {
					t.Fatalf("step %d: %s(%d) = %v, want error %v", i, st.op, st.tok, err, st.wantErr)
				}
			}
			if f.Highest() != tc.highest || f.HighestShared() != tc.shrd {
				t.Fatalf("highest %d, shared %d; want %d, %d", f.Highest(), f.HighestShared(), tc.highest, tc.shrd)
			}
		})
	}
}

func TestFenceConcurrent(t *testing.T) {
	var f etcdlock.Fence
	var wg sync.WaitGroup
	for i := 1; i <= 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.Admit(etcdlock.Token(i))
		}()
	}
	wg.Wait()
	if f.Highest() != 100 {
		t.Fatalf("highest %d", f.Highest())
	}
}

func TestToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want etcdlock.Token
		ok   bool
	}{
		{"1", 1, true}, {"9223372036854775807", 1<<63 - 1, true},
		{"0", 0, false}, {"-1", 0, false}, {"", 0, false}, {"1.5", 0, false}, {"abc", 0, false},
		{"9223372036854775808", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := etcdlock.ParseToken(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("ParseToken(%q) = %d, %v", tc.in, got, err)
			}
			if err != nil && !errors.Is(err, etcdlock.ErrInvalidArgument) {
				t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
			}
			if tc.ok && got.String() != tc.in {
				t.Fatalf("String() = %q", got.String())
			}
		})
	}
	b, err := json.Marshal(map[string]etcdlock.Token{"t": 42})
	if err != nil || string(b) != `{"t":"42"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var back map[string]etcdlock.Token
	if err := json.Unmarshal(b, &back); err != nil || back["t"] != 42 {
		t.Fatalf("unmarshal: %v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"t":"0"}`), &back); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("unmarshal of 0: %v", err)
	}
	if etcdlock.TokenHeader != "Fencing-Token" {
		t.Fatal(etcdlock.TokenHeader)
	}
}
