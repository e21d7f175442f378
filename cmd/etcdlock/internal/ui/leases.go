package ui

// This file holds what the page asks about leases: the time left on the
// leases it shows, and whether the lease of a deleted key lived on.

import (
	"context"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock/internal/etcdx"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// ttlFresh is how long an answer about a lease's time left is shown
	// before it is asked again.
	ttlFresh = time.Second
	// askEach is how many distinct leases are asked about one by one; past
	// it, one call lists every lease.
	askEach = 16
	// leaseTimeout bounds each question about leases.
	leaseTimeout = 2 * time.Second
)

// ttlCache asks etcd about leases. It is safe for concurrent use.
type ttlCache struct {
	mu   sync.Mutex
	cli  *clientv3.Client // nil until the cluster is dialed: nothing is asked
	left map[clientv3.LeaseID]ttlAnswer
}

type ttlAnswer struct {
	ttl int64 // seconds left; -1: gone
	at  time.Time
}

func newTTLCache(cli *clientv3.Client) *ttlCache {
	return &ttlCache{cli: cli, left: map[clientv3.LeaseID]ttlAnswer{}}
}

// setClient sets the client asked (for a cluster dialed late).
func (c *ttlCache) setClient(cli *clientv3.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cli = cli
}

// client returns the client asked, nil before it is dialed.
func (c *ttlCache) client() *clientv3.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cli
}

// timeLeft returns the seconds left on each lease (-1 for a gone one),
// asking etcd about those not asked within ttlFresh. A lease it cannot ask
// about is left out.
func (c *ttlCache) timeLeft(ctx context.Context, leases []clientv3.LeaseID) map[clientv3.LeaseID]int64 {
	now := time.Now()
	out := map[clientv3.LeaseID]int64{}
	var ask []clientv3.LeaseID
	asked := map[clientv3.LeaseID]bool{}
	c.mu.Lock()
	for _, id := range leases {
		if a, ok := c.left[id]; ok && now.Sub(a.at) < ttlFresh {
			out[id] = a.ttl
		} else if !asked[id] {
			asked[id] = true
			ask = append(ask, id)
		}
	}
	c.mu.Unlock()
	for _, id := range ask {
		ttl, ok := c.ask(ctx, id)
		if !ok {
			continue
		}
		out[id] = ttl
		c.mu.Lock()
		c.left[id] = ttlAnswer{ttl: ttl, at: now}
		c.mu.Unlock()
	}
	c.prune(now)
	return out
}

// prune forgets answers older than a minute.
func (c *ttlCache) prune(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.left) < 10000 {
		return
	}
	for id, a := range c.left {
		if now.Sub(a.at) > time.Minute {
			delete(c.left, id)
		}
	}
}

// alive reports which of leases etcd still has, and whether it could tell.
func (c *ttlCache) alive(ctx context.Context, leases []clientv3.LeaseID) (map[clientv3.LeaseID]bool, bool) {
	distinct := map[clientv3.LeaseID]bool{}
	for _, id := range leases {
		distinct[id] = false
	}
	if len(distinct) <= askEach {
		for id := range distinct {
			ttl, ok := c.ask(ctx, id)
			if !ok {
				return nil, false
			}
			distinct[id] = ttl > 0
		}
		return distinct, true
	}
	cli := c.client()
	if cli == nil {
		return nil, false
	}
	actx, cancel := context.WithTimeout(ctx, leaseTimeout)
	defer cancel()
	resp, err := cli.Leases(actx)
	if err != nil {
		return nil, false
	}
	for _, l := range resp.Leases {
		if _, ok := distinct[l.ID]; ok {
			distinct[l.ID] = true
		}
	}
	return distinct, true
}

// ask returns the seconds left on lease id (-1 once it is gone), and false
// when etcd could not say.
func (c *ttlCache) ask(ctx context.Context, id clientv3.LeaseID) (int64, bool) {
	cli := c.client()
	if cli == nil {
		return 0, false
	}
	actx, cancel := context.WithTimeout(ctx, leaseTimeout)
	defer cancel()
	resp, err := cli.TimeToLive(actx, id)
	switch {
	case err != nil && etcdx.IsLeaseNotFound(err):
		return -1, true
	case err != nil:
		return 0, false
	}
	return resp.TTL, true
}
