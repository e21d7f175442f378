package shard

// This file holds the small helpers of the package: the form of its
// errors, the bounds of the map watch's pause, the default owner of a move.

import (
	"context"
	"fmt"
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
