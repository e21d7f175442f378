package etcdlock

// This file holds the completion record of a name: a job that runs at most
// once per run id among the runs that complete (RunOnce).

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// onceRecord is the JSON value of a completion record.
type onceRecord struct {
	V        int    `json:"v"`
	ID       string `json:"id"`       // the last completed run's id
	Token    Token  `json:"token"`    // the grant that recorded it
	Identity string `json:"identity"` // the recording session's identity
	At       string `json:"at"`       // when, by the recording client's clock (RFC 3339)
}

// Completed reports whether the completion record of the lock's name already
// holds id or an id that sorts after it (byte order), that is, whether a run
// of id, or of a later id, completed. Ids must therefore sort in the order
// of the runs: ISO dates such as 2026-12-02, or zero-padded counters. The
// read is linearizable: under the grant, no later holder can have recorded
// anything yet, and every earlier holder's record is seen. So its answer
// counts only while the grant is current: the read ends when the grant ends
// (Context), and an answer that comes after the grant ended is not
// returned. Completed returns an error wrapping ErrNotHeld and the loss cause when
// the grant ended before the answer; ErrInvalidArgument for an empty id, for
// a shared grant (a Semaphore of more than one, an RWMutex reader: its
// holders run at once, so nothing of theirs can run once) and for a record
// that etcdlock did not write; and the read's error (wrapping ctx's)
// otherwise.
func (l *Lock) Completed(ctx context.Context, id string) (bool, error) {
	c, ok, err := l.completion(ctx, id)
	return ok && c.ID >= id, err
}

// completion is Completed's read: the name's completion record (ok false when
// there is none), read under the grant.
func (l *Lock) completion(ctx context.Context, id string) (c Completion, ok bool, err error) {
	q := l.w.q
	if err := l.onceArgs(id); err != nil {
		return Completion{}, false, q.opError("completed", err)
	}
	gctx, release := l.underGrant(ctx)
	defer release()
	resp, err := q.s.cli.Get(gctx, completionKey(q.name))
	switch nh := l.notHeld(); {
	case nh != nil:
		return Completion{}, false, q.opError("completed", nh)
	case err != nil:
		return Completion{}, false, q.opError("completed", ctxErr(ctx, err))
	case len(resp.Kvs) == 0:
		return Completion{}, false, nil
	}
	if c, err = decodeCompletion(resp.Kvs[0]); err != nil {
		return Completion{}, false, q.opError("completed", err)
	}
	return c, true, nil
}

// onceArgs checks the arguments of Completed and MarkCompleted: a run id, and a grant
// that only one holder has at a time.
func (l *Lock) onceArgs(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty run id", ErrInvalidArgument)
	case !exclusiveTag(l.w.q.tag):
		kind, mode := kindOfTag(l.w.q.tag)
		return fmt.Errorf("%w: a shared grant (%s %s) cannot run once: its holders run at once", ErrInvalidArgument, kind, mode)
	}
	return nil
}

// MarkCompleted records id as the last completed run of the lock's name,
// guarded by the grant: the write is applied only while this grant is
// current, so a holder that lost the lock (its lease expired while it was
// paused, or it was broken) records nothing, and the next holder's Completed
// sees every record made before it was granted. The write ends when the
// grant ends (Context), as Completed's read does. MarkCompleted returns nil once
// recorded; an error wrapping ErrNotHeld and the loss cause if the grant had
// ended (if the write was in flight then, it may have been applied, but
// only while the grant was current); ErrInvalidArgument as Completed; and the
// write's error (wrapping ctx's) otherwise, after which the record may or
// may not have been written (only ever by this grant).
func (l *Lock) MarkCompleted(ctx context.Context, id string) error {
	q := l.w.q
	if err := l.onceArgs(id); err != nil {
		return q.opError("mark completed", err)
	}
	rec, err := json.Marshal(onceRecord{V: 1, ID: id, Token: l.Token(), Identity: q.s.identity,
		At: time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return q.opError("mark completed", err)
	}
	gctx, release := l.underGrant(ctx)
	defer release()
	resp, err := q.s.cli.Txn(gctx).If(l.Guard()).Then(clientv3.OpPut(completionKey(q.name), string(rec))).Commit()
	switch nh := l.notHeld(); {
	case err == nil && resp.Succeeded:
		return nil
	case nh != nil:
		return q.opError("mark completed", nh)
	case err == nil: // refused: the grant was not current when etcd applied it
		return q.opError("mark completed", ErrNotHeld)
	}
	return q.opError("mark completed", ctxErr(ctx, err))
}

// RunOnce runs fn at most once per id among the runs that complete. It
// takes the lock (waiting in FIFO order, as Lock), reads the name's
// completion record (Completed), and if that holds id or a later id it releases
// and returns an error wrapping ErrAlreadyCompleted without calling fn.
// Otherwise it calls fn with the grant's context (ended on loss, see
// Lock.Context) and the grant, and if fn returns nil it records id, guarded
// by the grant (MarkCompleted), then releases.
//
// A run that crashes, fails (fn's error is returned as it is, and nothing is
// recorded) or loses the lock before recording is run again by the next
// caller with that id: a crash makes it at-least-once, and fn's work should
// be fenced with the grant's token (Lock.Token, Lock.Guard) where a repeat
// matters.
// Only a completed run is exactly-once, and only while every caller uses the
// same name and ids that sort in the order of the runs (see Completed).
//
// RunOnce returns nil when fn ran and id was recorded and released; the
// errors of Lock; ErrInvalidArgument for an empty id or a nil fn (before
// taking anything); ErrAlreadyCompleted; fn's error; MarkCompleted's errors
// (ErrNotHeld when the grant ended before the record); or the release's
// error. It is safe for concurrent use.
func (m *Mutex) RunOnce(ctx context.Context, id string, fn func(ctx context.Context, l *Lock) error) error {
	return runOnce(ctx, m.name, id, fn, m.Lock)
}

// TryRunOnce is RunOnce with TryLock: when the lock is held or waited for it
// returns an error wrapping ErrLocked at once, writes nothing and does not
// call fn.
func (m *Mutex) TryRunOnce(ctx context.Context, id string, fn func(ctx context.Context, l *Lock) error) error {
	return runOnce(ctx, m.name, id, fn, m.TryLock)
}

// runOnce is RunOnce with take as the way to the grant.
func runOnce(ctx context.Context, name, id string, fn func(context.Context, *Lock) error, take func(context.Context) (*Lock, error)) (err error) {
	switch {
	case id == "":
		return newError("run once", name, fmt.Errorf("%w: empty run id", ErrInvalidArgument))
	case fn == nil:
		return newError("run once", name, fmt.Errorf("%w: nil function", ErrInvalidArgument))
	}
	l, err := take(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// A detached, bounded release: a canceled ctx must not keep the
		// lock held; if it does not finish, the session's reaper does.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.w.q.s.revokeBound())
		defer cancel()
		if uerr := l.Unlock(rctx); err == nil {
			err = uerr
		}
	}()
	// The read answers only while the grant is current: fn never starts
	// on a grant this process knows lost.
	c, ok, err := l.completion(ctx, id)
	switch {
	case err != nil:
		return err
	case ok && c.ID >= id:
		return newError("run once", name, fmt.Errorf("%w: run %q (%s)", ErrAlreadyCompleted, id, c))
	}
	if err := fn(l.Context(), l); err != nil {
		return err
	}
	return l.MarkCompleted(ctx, id)
}
