package serve

// This file holds the callers' own etcd clients (Config.ClientAuth): with
// --client-auth etcd each request carries HTTP Basic credentials, which
// serve hands to etcd (a client of that user logs in with them), and the
// request acts through that client only, so etcd's RBAC decides what each
// caller may hold, read, break or observe. Clients are cached by user and
// password (a hash of it), shared by that user's requests, sessions and
// shared leases, bounded in number, and closed once unused for userIdle.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Bounds of the user clients.
const (
	// maxUserClients bounds the cached clients (a gRPC connection and a
	// login each); a request that needs one more is refused too_many.
	// Dials in flight do not count (they may end in a refusal, which
	// anyone can cause), so up to maxDials more may be open a moment.
	maxUserClients = 64
	// maxDials bounds the dials (logins: a bcrypt each in etcd) in flight;
	// a request that needs one more waits for its turn.
	maxDials = 8
	// userIdle is how long a client nobody uses stays open.
	userIdle = 2 * time.Minute
)

// Dialer returns a client of etcd that acts as user, logged in with
// password; it fails with rpctypes.ErrAuthFailed when etcd refuses them.
type Dialer func(ctx context.Context, user, password string) (*clientv3.Client, error)

// userClients is the cache of the callers' clients. Safe for concurrent
// use.
type userClients struct {
	// Set by newUserClients, then read-only.
	dial Dialer
	idle time.Duration

	dials chan struct{} // a slot per dial in flight (maxDials)

	mu      sync.Mutex
	byCred  map[string]*userClient // by credKey
	dialing int                    // of byCred, those whose dial is in flight
	closed  bool                   // set by close: no client opens after it
	open    sync.WaitGroup         // dials and closes in flight
}

// userClient is one cached client; its fields after ready are guarded by
// userClients.mu.
type userClient struct {
	ready chan struct{} // closed once the dial ended
	cli   *clientv3.Client
	err   error // the dial's
	uses  int
	idle  *time.Timer // closes it; set while uses is 0
}

func newUserClients(dial Dialer, idle time.Duration) *userClients {
	return &userClients{dial: dial, idle: orDefault(idle, userIdle), byCred: map[string]*userClient{},
		dials: make(chan struct{}, maxDials)}
}

// credKey keys a user's client by its user and a hash of its password, so
// that a request with another password never shares a client logged in
// with the right one.
func credKey(user, password string) string {
	h := sha256.Sum256([]byte(user + "\x00" + password))
	return user + "\x00" + hex.EncodeToString(h[:])
}

// use returns the client of user and password, dialing one (one dial per
// key at a time, maxDials at once), and the end of this use (call it
// once). It fails with unauthenticated when etcd refuses the credentials,
// too_many past maxUserClients, errStopping after close, or unavailable.
func (u *userClients) use(ctx context.Context, user, password string) (*clientv3.Client, func(), error) {
	key := credKey(user, password)
	uc, err := u.entry(ctx, key, user, password)
	if err != nil {
		return nil, nil, err
	}
	done := func() { u.done(key, uc) }
	select {
	case <-uc.ready:
	case <-ctx.Done():
		done()
		return nil, nil, ctx.Err()
	}
	if uc.err != nil {
		done()
		return nil, nil, uc.err
	}
	return uc.cli, done, nil
}

// entry counts a use of key's entry, first starting its dial when it has
// none: the dial waits for a slot (with ctx) before its entry exists, so
// a flood of logins etcd refuses waits its turn and takes no place among
// the clients kept.
func (u *userClients) entry(ctx context.Context, key, user, password string) (*userClient, error) {
	slot := false // holds a place in u.dials
	defer func() {
		if slot {
			<-u.dials
		}
	}()
	for {
		u.mu.Lock()
		uc := u.byCred[key]
		switch {
		case u.closed:
			u.mu.Unlock()
			return nil, errStopping
		case uc == nil && len(u.byCred)-u.dialing >= maxUserClients:
			u.mu.Unlock()
			return nil, errorf(codeTooMany, "the server has clients of %d users open, the most it keeps", maxUserClients)
		case uc == nil && slot:
			uc = &userClient{ready: make(chan struct{})}
			u.byCred[key] = uc
			u.dialing++
			u.open.Add(1)
			slot = false // dialFor frees it
			go u.dialFor(key, uc, user, password)
		}
		if uc != nil {
			u.take(uc)
			u.mu.Unlock()
			return uc, nil
		}
		u.mu.Unlock()
		select {
		case u.dials <- struct{}{}:
			slot = true
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// take counts one more use of uc. Call with u.mu held.
func (u *userClients) take(uc *userClient) {
	uc.uses++
	if uc.idle != nil {
		uc.idle.Stop()
		uc.idle = nil
	}
}

// dialFor dials uc; a failed dial leaves the cache at once, so the next
// request tries again.
func (u *userClients) dialFor(key string, uc *userClient, user, password string) {
	defer u.open.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := u.dial(ctx, user, password)
	if err != nil {
		err = loginError(err)
	}
	<-u.dials
	u.mu.Lock()
	u.dialing--
	uc.cli, uc.err = cli, err
	if err != nil && u.byCred[key] == uc {
		delete(u.byCred, key)
	}
	if err == nil && u.closed { // close came during the dial
		u.closeLater(uc)
	}
	u.mu.Unlock()
	close(uc.ready)
}

// loginError maps a dial's failure to the API's error.
func loginError(err error) error {
	if errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrGRPCAuthFailed) ||
		errors.Is(rpctypes.Error(err), rpctypes.ErrAuthFailed) {
		return errorf(codeUnauthenticated, "etcd refused the user name or password")
	}
	return errorf(codeUnavailable, "logging in to etcd: %v", err)
}

// done ends one use of uc; the last arms its idle close.
func (u *userClients) done(key string, uc *userClient) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if uc.uses--; uc.uses > 0 || u.closed || uc.cli == nil || u.byCred[key] != uc {
		return
	}
	uc.idle = time.AfterFunc(u.idle, func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if uc.uses == 0 && !u.closed && u.byCred[key] == uc {
			delete(u.byCred, key)
			u.closeLater(uc)
		}
	})
}

// closeLater closes uc's client in a goroutine close waits for. Call
// with u.mu held.
func (u *userClients) closeLater(uc *userClient) {
	u.open.Add(1)
	go func() {
		defer u.open.Done()
		_ = uc.cli.Close()
	}()
}

// close closes every client, once nothing uses them (the server's stop
// calls it after its sessions are closed), and waits for dials in flight.
func (u *userClients) close() {
	u.mu.Lock()
	u.closed = true
	for key, uc := range u.byCred {
		if uc.idle != nil {
			uc.idle.Stop()
		}
		if uc.cli != nil {
			u.closeLater(uc)
		}
		delete(u.byCred, key)
	}
	u.mu.Unlock()
	u.open.Wait()
}
