package etcdlock

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestLockAllArguments(t *testing.T) {
	s := &Session{}
	many := make([]string, MaxLockAllNames+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		what  string
		s     *Session
		names []string
		want  error
	}{
		{"nil session", nil, []string{"a"}, ErrInvalidArgument},
		{"no names", s, nil, ErrInvalidArgument},
		{"too many", s, many, ErrInvalidArgument},
		{"twice", s, []string{"a", "b", "a"}, ErrInvalidArgument},
		{"bad name", s, []string{"a", ""}, ErrInvalidName},
		{"the most", s, many[:MaxLockAllNames], nil},
	} {
		t.Run(tc.what, func(t *testing.T) {
			qs, err := lockAllQueues(tc.s, tc.names)
			if tc.want == nil {
				if err != nil || len(qs) != len(tc.names) {
					t.Fatalf("%d queues, %v", len(qs), err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

func TestLockDelayOption(t *testing.T) {
	for _, tc := range []struct {
		d  time.Duration
		ok bool
	}{{0, true}, {3 * time.Second, true}, {time.Minute, true}, {-time.Millisecond, false}, {time.Minute + 1, false}} {
		var o sessionOptions
		WithLockDelay(tc.d)(&o)
		if ok := o.err == nil; ok != tc.ok || (ok && o.lockDelay != tc.d) || (!ok && !errors.Is(o.err, ErrInvalidArgument)) {
			t.Errorf("WithLockDelay(%v): delay %v, err %v", tc.d, o.lockDelay, o.err)
		}
	}
	v := decodeValue([]byte(encodeValue("i", "", time.Now(), time.Time{}, 2500*time.Millisecond, 0)))
	if v.lockDelay() != 2500*time.Millisecond {
		t.Fatalf("lock-delay read back as %v", v.lockDelay())
	}
	if v := decodeValue([]byte(encodeValue("i", "", time.Now(), time.Time{}, 0, 0))); v.Delay != 0 || v.lockDelay() != 0 {
		t.Fatalf("no delay read back as %v", v.lockDelay())
	}
}
