package etcdlock

// This file holds the session's lease requests: the grant, made idempotent
// by an ID chosen here, and the revoke.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// revokeAttempt bounds one attempt of a revoke. Attempts go over the
// client's balanced connection, so a retry usually takes another path.
const revokeAttempt = time.Second

// leaseGrant is a granted lease: its ID and TTL, and the send time of the first
// attempt, the earliest moment the server can have started its TTL.
type leaseGrant struct {
	id     clientv3.LeaseID
	ttl    time.Duration
	sentAt time.Time
}

// grantLease grants a lease of secs seconds under an ID chosen here, at
// random. Each attempt is bounded by wire.AttemptTimeout and a failed one is
// retried with the same ID until ctx ends: an attempt caught by an etcd
// leader crash would otherwise wait out etcd's own request timeout (5 s and
// two election timeouts), and a retry of an attempt that was applied finds
// the lease granted ("lease already exists") instead of granting a second
// one. The ID is 63 random bits: that it names another client's lease is as
// likely as guessing a 63-bit secret. If grantLease fails after an attempt
// of unknown outcome, it revokes the ID (once, briefly): a lease without
// keys expires within secs anyway.
func grantLease(ctx context.Context, cli *clientv3.Client, secs int64) (leaseGrant, error) {
	g := leaseGrant{id: randomLeaseID(), sentAt: time.Now()}
	lc := pb.NewLeaseClient(cli.ActiveConnection())
	b := wire.NewBackoff(requestFloor, requestCeil)
	unknownSent := false
	for {
		actx, cancel := context.WithTimeout(ctx, wire.AttemptTimeout)
		resp, err := lc.LeaseGrant(actx, &pb.LeaseGrantRequest{TTL: secs, ID: int64(g.id)})
		cancel()
		if err == nil && resp.Error == "" {
			g.ttl = time.Duration(resp.TTL) * time.Second
			return g, nil
		}
		if err == nil {
			err = errors.New(resp.Error)
		}
		err = rpctypes.Error(err)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseExist) && unknownSent:
			return g.adopt(ctx, cli)
		case errors.Is(err, rpctypes.ErrLeaseExist):
			g.id = randomLeaseID() // another client's lease: draw again
			continue
		}
		switch wire.Classify(err) {
		case wire.Refused, wire.LeaseGone:
			return leaseGrant{}, err
		}
		unknownSent = true
		if !b.Wait(ctx) {
			g.forget(cli)
			return leaseGrant{}, errors.Join(ctxErr(ctx, ctx.Err()), err)
		}
	}
}

// adopt takes the lease g.id that an earlier attempt granted: its TTL is
// the one the server granted.
func (g leaseGrant) adopt(ctx context.Context, cli *clientv3.Client) (leaseGrant, error) {
	resp, err := cli.TimeToLive(ctx, g.id)
	switch {
	case err != nil:
		g.forget(cli)
		return leaseGrant{}, ctxErr(ctx, err)
	case resp.TTL <= 0:
		return leaseGrant{}, fmt.Errorf("%w: the lease an earlier attempt granted expired before its answer came", ErrSessionExpired)
	}
	g.ttl = time.Duration(resp.GrantedTTL) * time.Second
	return g, nil
}

// forget revokes g.id, once and briefly, after a grant that failed with an
// attempt of unknown outcome.
func (g leaseGrant) forget(cli *clientv3.Client) {
	ctx, cancel := context.WithTimeout(cli.Ctx(), revokeAttempt)
	defer cancel()
	_, _ = cli.Revoke(ctx, g.id)
}

// randomLeaseID returns a random positive lease ID.
func randomLeaseID() clientv3.LeaseID {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		if id := int64(binary.BigEndian.Uint64(b[:]) >> 1); id != 0 {
			return clientv3.LeaseID(id)
		}
	}
}

// revokeLease revokes the session's lease, retrying until the server
// answers or ctx ends; each attempt is bounded by revokeAttempt. A lease the
// server no longer knows counts as revoked. It returns nil once the lease is
// gone, else the error of the last attempt (with ctx's when ctx ended).
func (s *Session) revokeLease(ctx context.Context) error {
	b := wire.NewBackoff(requestFloor, requestCeil)
	for {
		actx, cancel := context.WithTimeout(ctx, revokeAttempt)
		_, err := s.cli.Revoke(actx, s.lease)
		cancel()
		switch wire.Classify(err) {
		case wire.Applied, wire.LeaseGone:
			return nil
		case wire.Refused:
			return err
		}
		if !b.Wait(ctx) {
			return errors.Join(ctxErr(ctx, ctx.Err()), err)
		}
	}
}
