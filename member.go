package etcdlock

// This file holds the check that keeps a plain session (NewSession) from
// acquiring on a member cluster of a sharded deployment: its writes would
// not carry the slot's stamp guard (slotguard.go), so a move of the slot
// could not freeze them.

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock/internal/layout"
)

// shardMember reports whether cli's cluster is a member of a sharded
// deployment: whether it holds the generation key (one count-only read).
// The read is serializable, so that a member cut off from its leader still
// answers it (the grant then goes on to another member): the key is
// created before the cluster holds any slot and never deleted, so only a
// member that lags behind the cluster's first slot could miss it. A user
// who may not read it is taken for one on a cluster that is not sharded
// (logged at debug); a closed client is left to newSession.
func shardMember(ctx context.Context, cli *clientv3.Client, log *zap.Logger) (bool, error) {
	if cli.Ctx().Err() != nil {
		return false, nil
	}
	resp, err := cli.Get(ctx, layout.GenerationKey, clientv3.WithCountOnly(), clientv3.WithSerializable())
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		log.Debug("new session: may not read "+layout.GenerationKey+"; taking the cluster for one that is not sharded", zap.Error(err))
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s: %w", layout.GenerationKey, ctxErr(ctx, err))
	}
	return resp.Count > 0, nil
}

// errShardMember refuses an acquisition of a plain session on a member
// cluster of a sharded deployment (see NewSession).
var errShardMember = fmt.Errorf("%w: the cluster is part of a sharded deployment (it holds %s): "+
	"open the session with shard.NewSession", ErrInvalidArgument, layout.GenerationKey)
