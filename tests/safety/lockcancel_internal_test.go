//go:build linux

package safety

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestLockCanceler checks both ways a CANCEL line bounds a Lock: the Lock in
// progress, or (between Locks) the next one, and that a Lock which ends
// first is not canceled later.
func TestLockCanceler(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   bool // the CANCEL comes between Locks
		d        time.Duration
		canceled bool
	}{
		{"in progress", false, time.Millisecond, true},
		{"next Lock", true, time.Millisecond, true},
		{"ended first", false, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := &worker{ctx: context.Background(), out: bufio.NewWriter(&out)}
			w.cancels.w = w
			if tc.before {
				w.cancels.request(tc.d)
			}
			ctx, end := w.cancels.begin(0)
			if !tc.before {
				w.cancels.request(tc.d)
			}
			if tc.canceled {
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the bounded Lock was not canceled")
				}
			} else if ctx.Err() != nil {
				t.Fatal("a Lock bounded by an hour was canceled at once")
			}
			if !end() {
				t.Fatal("end reported the Lock unbounded")
			}
			if got := strings.Count(out.String(), "CANCELING 0 "); got != 1 {
				t.Fatalf("said %q, want one CANCELING", out.String())
			}
			// A later CANCEL bounds the next Lock, not the ended one.
			w.cancels.request(tc.d)
			if w.cancels.pending != tc.d {
				t.Fatalf("pending = %v after the Lock ended, want %v", w.cancels.pending, tc.d)
			}
		})
	}
}
