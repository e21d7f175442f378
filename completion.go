package etcdlock

// This file holds what operators do with a name's completion record
// (RunOnce, once.go): read it, and clear it.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Completion is a name's completion record: the last completed run of
// RunOnce (or etcdlock run --once).
type Completion struct {
	ID       string    // the run's id
	Token    Token     // the grant that recorded it
	Identity string    // of the session that recorded it
	At       time.Time // when, by that client's clock
	Revision int64     // the record's etcd revision: ClearCompletion clears exactly this record
}

// String says which run completed, when and by whom, as etcdlock's
// messages show it.
func (c Completion) String() string {
	return fmt.Sprintf("the last completed run is %q, recorded %s by %q with token %d",
		c.ID, c.At.Format(time.RFC3339), c.Identity, c.Token)
}

// decodeCompletion decodes kv, a completion record; it fails with
// ErrInvalidArgument for a value that etcdlock did not write.
func decodeCompletion(kv *mvccpb.KeyValue) (Completion, error) {
	var rec onceRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.V != 1 {
		return Completion{}, fmt.Errorf("%w: the completion record %s holds %q, not a record of etcdlock",
			ErrInvalidArgument, kv.Key, kv.Value)
	}
	at, _ := time.Parse(time.RFC3339Nano, rec.At) // zero if it does not parse
	return Completion{ID: rec.ID, Token: rec.Token, Identity: rec.Identity, At: at, Revision: kv.ModRevision}, nil
}

// LastCompletion reads the completion record of name: ok is false when
// name has none (no run completed, or it was cleared). It returns an error
// wrapping ErrInvalidArgument for a nil client or a record etcdlock did not
// write, ErrInvalidName for a bad name, and the read's error (wrapping
// ctx's) otherwise. It needs no grant: what it reads may change as soon as
// it returns (only to a later run's record, or to none when cleared).
func LastCompletion(ctx context.Context, cli *clientv3.Client, name string) (c Completion, ok bool, err error) {
	if cli == nil {
		return Completion{}, false, newError("last completion", name, fmt.Errorf("%w: nil client", ErrInvalidArgument))
	}
	if err := validateName(name); err != nil {
		return Completion{}, false, newError("last completion", "", err)
	}
	resp, err := cli.Get(ctx, completionKey(name))
	switch {
	case err != nil:
		return Completion{}, false, newError("last completion", name, ctxErr(ctx, err))
	case len(resp.Kvs) == 0:
		return Completion{}, false, nil
	}
	c, err = decodeCompletion(resp.Kvs[0])
	if err != nil {
		return Completion{}, false, newError("last completion", name, err)
	}
	return c, true, nil
}

// ClearCompletion deletes the completion record of name that LastCompletion
// returned as c, guarded by its revision: a record written since (a later
// run completed) is left alone, and ClearCompletion then fails with an error
// wrapping ErrChanged. After it, every run id runs again (the next RunOnce
// of any id finds no record). It returns ErrInvalidArgument for a nil client
// or a c without a revision, ErrInvalidName for a bad name, and the
// delete's error (wrapping ctx's) otherwise.
func ClearCompletion(ctx context.Context, cli *clientv3.Client, name string, c Completion) error {
	switch {
	case cli == nil:
		return newError("clear completion", name, fmt.Errorf("%w: nil client", ErrInvalidArgument))
	case c.Revision < 1:
		return newError("clear completion", name, fmt.Errorf("%w: a record of no revision (read it with LastCompletion)", ErrInvalidArgument))
	}
	if err := validateName(name); err != nil {
		return newError("clear completion", "", err)
	}
	key := completionKey(name)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", c.Revision)).
		Then(clientv3.OpDelete(key)).Commit()
	switch {
	case err != nil:
		return newError("clear completion", name, ctxErr(ctx, err))
	case !resp.Succeeded:
		return newError("clear completion", name, fmt.Errorf("%w: the record of run %q is no longer the last", ErrChanged, c.ID))
	}
	return nil
}
