package shard

// This file holds the sentinels of package shard. Its calls also return
// the library's (etcdlock.ErrInvalidArgument, ErrSessionClosed...), wrapped
// in an *etcdlock.Error as the library's own calls do.

import "errors"

var (
	// ErrMoveInProgress is returned by Shards.MoveSlot when the slot is already
	// being moved by another call (or a call that stopped before it
	// finished: resume it with MoveOptions.Resume).
	ErrMoveInProgress = errors.New("etcdlock: move in progress")
	// ErrMoveAborted is returned by Shards.MoveSlot when the move it carries out
	// was aborted (Shards.AbortMove), or was finished by another call and followed
	// by a later move, while it ran: it wrote nothing after that.
	ErrMoveAborted = errors.New("etcdlock: move aborted")
	// ErrUnavailable is returned when a cluster an operation needs does not
	// answer: MoveSlot and AbortMove then record and change nothing.
	ErrUnavailable = errors.New("etcdlock: cluster unavailable")
)
