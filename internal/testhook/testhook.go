// Package testhook lets the tests of package etcdlock that live in the tests
// module (they need embedded etcd members, which the library's own module
// must not require) reach the internals they check: test hooks at the points
// of an acquisition, the key layout, and a session's keeper, batcher,
// barriers and validity clock.
//
// Package etcdlock sets every variable here when it is initialised (its
// testhooks.go), but ShardSession, which package shard sets (its
// testhooks.go); nothing else may set them. A *Session, *Lock or *Leadership
// is passed as any, since this package cannot import etcdlock. Only tests
// use this package; being internal, it is no part of the public API.
package testhook

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Point names a point of an acquisition where tests can interfere (cancel a
// context, fake an error) through a session's hook.
type Point int

// The points, in the order an acquisition meets them.
const (
	BeforeEnqueue Point = iota // before the enqueue Txn is sent
	Enqueued                   // the enqueue Txn returned; err is its error
	Waiting                    // a predecessor watch is open
	HandoffRead                // before a read of the queue at a revision
	WatchCreated               // a predecessor watch's created notification was handled
	Monitor                    // the own-key monitor starts
	Reaped                     // the reaper's delete returned; err is its error
	HoldOff                    // a granted waiter starts to wait out a lock-delay
	SharedWatch                // a pinned session's watch opens on the client's balanced connection (only once the session has ended)
	ConnWait                   // a pinned session's watch waits for the keeper to lend a connection
	NumPoints
)

// Hook is called at each Point with the error at that point and returns
// the error to go on with.
type Hook func(p Point, err error) error

// A session's knobs.
var (
	// SetHook sets the hook of session s (nil: none), at any time.
	SetHook func(s any, h Hook)
	// SetMonitorDelay sets how long s's waiters wait before they watch their
	// own key.
	SetMonitorDelay func(s any, d time.Duration)
	// Expire ends s as its validity clock or a lost lease would.
	Expire func(s any, cause error, reason string)
	// RunOutClock makes s's validity clock read as run out from now on.
	RunOutClock func(s any)
	// ReaperIdle reports whether s's reaper has nothing to do.
	ReaperIdle func(s any) bool
	// SessionOf returns the *Session of a *Lock or a *Leadership.
	SessionOf func(grant any) any
	// ShardSession returns the routed *etcdlock.Session inside a
	// *shard.Session, and true; false for anything else. Package shard
	// sets it, so that every hook above also takes a *shard.Session.
	ShardSession func(s any) (any, bool)
)

// The key layout.
var (
	KeyRoot     string
	ListPage    int // the page size of List and Describe
	TagMutex    string
	TagElection string
	NamePrefix  func(name string) string
	EscapeName  func(name string) string
	ListPrefix  func(prefix string) string
	WaiterKey   func(dir, tag string, lease clientv3.LeaseID, slot int) string
	BarrierKey  func(dir string, lease clientv3.LeaseID) string
	OnceKey     func(name string) string
	IsQueueKey  func(key string) bool
	EncodeValue func(identity, value string, at, granted time.Time) string
	// DecodeValue returns the value a key's stored value carries.
	DecodeValue func(b []byte) string
)

// A session's barriers (DESIGN.md, "Writes of unknown outcome").
var (
	// BarrierGuard returns the compare every key-creating write of s in dir
	// carries now.
	BarrierGuard func(s any, dir string) clientv3.Cmp
	RaiseBarrier func(ctx context.Context, s any, dir string) error
	BarrierRev   func(s any, dir string) int64
)

// The keeper, its connections and the lease.
var (
	AttemptTimeout time.Duration
	RevokeAttempt  time.Duration
	ErrUnanswered  error // why the keeper leaves an endpoint that does not answer
	// LentConn reports whether s's keeper lends a connection, and whether
	// its member said it was the leader.
	LentConn func(s any) (lent, leader bool)
	// HoldKeeper makes s's keeper wait, before it next connects, until
	// release is called (release is idempotent): it lends no connection
	// meanwhile, as a keeper slow to reconnect.
	HoldKeeper func(s any) (release func())
	// Lend makes s's keeper lend conn (to the member at addr) to the queue;
	// retire retires it.
	Lend func(s any, cli *clientv3.Client, conn *grpc.ClientConn, addr string) (retire func())
	// StreamConn wraps conn as the keeper would lend it.
	StreamConn func(cli *clientv3.Client, conn *grpc.ClientConn) (borrow func() bool, retire, giveBack func(), kv clientv3.KV)
	// GrantLease grants a lease as NewSession does (idempotent retries).
	GrantLease func(ctx context.Context, cli *clientv3.Client, secs int64) (clientv3.LeaseID, time.Duration, error)
)

// A client's batcher (group commit).
var (
	BatchBytes int // the default request size limit
	// BeforeSend sets the function s's batcher calls with the queue dirs
	// of each batch before it sends it (nil: none).
	BeforeSend func(s any, f func(dirs []string))
	// Pending returns how many writes wait in s's batcher.
	Pending func(s any) int
	// BatchLimits returns s's batcher's writes and bytes per batch.
	BatchLimits func(s any) (ops, bytes int)
)
