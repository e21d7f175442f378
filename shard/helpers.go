package shard

// This file holds the small helpers of the package: the form of its
// errors, the pause of its retry loops, the default owner of a move.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/etcdlock/etcdlock"
)

// newError wraps err as the library's errors are: an *etcdlock.Error of op
// on name.
func newError(op, name string, err error) error { return &etcdlock.Error{Op: op, Name: name, Err: err} }

// ctxErr prefers ctx's error (with its cause) when ctx has ended.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("%w (%w)", ctx.Err(), cause)
	}
	return ctx.Err()
}

// backoff is the pause between attempts of the map watch: jittered,
// doubling from floor up to ceil, back at floor after reset.
type backoff struct{ floor, ceil, next time.Duration }

func newBackoff(floor, ceil time.Duration) *backoff { return &backoff{floor, ceil, floor} }

// wait pauses for the next delay (jittered: 50% to 100% of it) and doubles
// it; false, early, when ctx ends.
func (b *backoff) wait(ctx context.Context) bool {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, b.ceil)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (b *backoff) reset() { b.next = b.floor }

// The bounds of the map watch's pause.
const (
	watchFloor = 20 * time.Millisecond
	watchCeil  = 2 * time.Second
)

// defaultIdentity is a move's default owner: host/pid.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
