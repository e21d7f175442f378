//go:build linux

package safety

// The sharded cell's session faults: revocations of the workers' cluster
// sessions' leases, at random and targeted at a holder between its read and
// its write (revokeScenario).

import (
	"context"
	"errors"
	"time"

	"github.com/etcdlock/etcdlock"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// revokeCap bounds how long a targeted revocation holds its victim: the
// time for the next holder to read.
const revokeCap = 8 * time.Second

// revokeScenario is a targeted revocation: a holder that has read stops
// before its write, the lease of its grant's key is revoked, and once a
// later holder of the name has read (or revokeCap passed) it writes. Its
// write must then be refused.
type revokeScenario struct {
	client  int
	name    string
	token   etcdlock.Token
	key     string
	release chan struct{} // closed to let the victim write
	read    chan struct{} // closed when a later holder's read was admitted
	// guarded by sc.mu
	readClosed, revoked bool
	heldToken           etcdlock.Token
}

// revokeResult is the outcome of a revokeScenario.
type revokeResult struct {
	token, heldToken etcdlock.Token
	revoked, held    bool
	outcome          string // of the victim's write
}

// victim makes the caller, which holds l on name and has read, the victim
// of a targeted revocation if one is armed, and returns the scenario; nil
// if none is.
func (sc *shardCell) victim(client int, name string, l *etcdlock.Lock) *revokeScenario {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !sc.armRevoke || sc.scen != nil || sc.stopping {
		return nil
	}
	sc.armRevoke = false
	s := &revokeScenario{client: client, name: name, token: l.Token(), key: l.Key(),
		release: make(chan struct{}), read: make(chan struct{})}
	sc.scen = s
	sc.n.revokeScenarios++
	go sc.runRevoke(s)
	return s
}

// endScenario records s's outcome once its victim wrote. sc.mu is held.
func (sc *shardCell) endScenario(s *revokeScenario, outcome string) {
	sc.results = append(sc.results, revokeResult{token: s.token, heldToken: s.heldToken, revoked: s.revoked,
		held: s.readClosed, outcome: outcome})
	if s.revoked && s.readClosed {
		sc.n.revokedHeld++
	}
	sc.scen = nil
}

// noteRead tells a targeted revocation on name that token tok was admitted
// to read.
func (sc *shardCell) noteRead(name string, tok etcdlock.Token) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if s := sc.scen; s != nil && s.name == name && tok > s.token && !s.readClosed {
		s.readClosed, s.heldToken = true, tok
		close(s.read)
	}
}

// runRevoke revokes the victim's lease, waits for a later holder's read
// (or revokeCap), then lets the victim write.
func (sc *shardCell) runRevoke(s *revokeScenario) {
	deadline := time.Now().Add(revokeCap)
	revoked := sc.revoke(leaseOfKey(s.key), deadline)
	sc.mu.Lock()
	s.revoked = revoked
	if revoked {
		sc.n.revokes++
	}
	sc.mu.Unlock()
	if revoked {
		select {
		case <-s.read:
		case <-time.After(time.Until(deadline)):
		}
	}
	close(s.release)
}

// revoke revokes lease on whichever cluster holds it, trying until
// deadline; it reports whether a revocation succeeded.
func (sc *shardCell) revoke(lease int64, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		gone := 0
		for _, id := range sc.ids {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := sc.clis[id].Revoke(ctx, clientv3.LeaseID(lease))
			cancel()
			if err == nil {
				return true
			}
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				gone++
			}
		}
		if gone == len(sc.ids) {
			return false // expired or lost already
		}
		time.Sleep(100 * time.Millisecond) // a retry's backoff
	}
	return false
}

// revokeLane arms a targeted revocation, or revokes a random lease of a
// random cluster (a worker's cluster session), every 1-3 s.
func (sc *shardCell) revokeLane(ctx context.Context) {
	for sleepCtx(ctx, sc.randDur(time.Second, 3*time.Second)) {
		if sc.randN(2) == 0 {
			sc.mu.Lock()
			if sc.scen == nil {
				sc.armRevoke = true
			}
			sc.mu.Unlock()
			continue
		}
		cli := sc.clis[sc.ids[sc.randN(len(sc.ids))]]
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cli.Leases(lctx)
		if err == nil && len(resp.Leases) > 0 {
			_, err = cli.Revoke(lctx, resp.Leases[sc.randN(len(resp.Leases))].ID)
			if err == nil {
				sc.mu.Lock()
				sc.n.revokes++
				sc.mu.Unlock()
			}
		}
		cancel()
	}
}
