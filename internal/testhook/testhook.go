// Package testhook lets the tests of package etcdlock that live in the tests
// module (they need embedded etcd members, which the library's own module
// must not require) reach the internals they check: test hooks at the points
// of an acquisition, parts of the key layout that internal/layout does not
// hold, and a session's keeper, batcher, barriers and validity clock.
//
// Everything here is typed. A session's knobs (Knobs) are reached through
// a Handle, which package etcdlock embeds, under an unexported name, in
// its Session, and package shard in its Session: Session is the interface
// of what carries one, and only a type that embeds a Handle implements it,
// so a test that passes anything else does not compile. Package etcdlock
// sets the variables here when it is initialised (its testhooks.go); nothing
// else may set them. Only tests use this package; being internal, it is no
// part of the public API.
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

// Knobs are a session's test knobs; package etcdlock implements them.
type Knobs interface {
	// SetHook sets the session's hook (nil: none), at any time.
	SetHook(h Hook)
	// SetMonitorDelay sets how long its waiters wait before they watch
	// their own key.
	SetMonitorDelay(d time.Duration)
	// Expire ends the session as its validity clock or a lost lease would.
	Expire(cause error, reason string)
	// RunOutClock makes its validity clock read as run out from now on.
	RunOutClock()
	// ReaperIdle reports whether its reaper has nothing to do.
	ReaperIdle() bool
	// BarrierGuard returns the compare every key-creating write of the
	// session in dir carries now (DESIGN.md, "Writes of unknown outcome").
	BarrierGuard(dir string) clientv3.Cmp
	RaiseBarrier(ctx context.Context, dir string) error
	BarrierRev(dir string) int64
	// LentConn reports whether its keeper lends a connection, and whether
	// its member said it was the leader.
	LentConn() (lent, leader bool)
	// HoldKeeper makes its keeper wait, before it next connects, until
	// release is called (release is idempotent): it lends no connection
	// meanwhile, as a keeper slow to reconnect.
	HoldKeeper() (release func())
	// Lend makes its keeper lend conn (to the member at addr) to the
	// queue; retire retires it.
	Lend(cli *clientv3.Client, conn *grpc.ClientConn, addr string) (retire func())
	// BeforeSend sets the function its batcher calls with the queue dirs
	// of each batch before it sends it (nil: none).
	BeforeSend(f func(dirs []string))
	// Pending returns how many writes wait in its batcher.
	Pending() int
	// BatchLimits returns its batcher's writes and bytes per batch.
	BatchLimits() (ops, bytes int)
}

// Handle gives a session's Knobs to the tests that hold the session. A
// type embeds it (under an unexported alias, so it adds no exported field
// or method) to implement Session.
type Handle struct{ k Knobs }

// NewHandle returns the Handle of a session whose knobs are k.
func NewHandle(k Knobs) Handle { return Handle{k: k} }

// HandleOf returns a Handle to the knobs of s: package shard's Session
// hands on those of the core's session inside it.
func HandleOf(s Session) Handle { return Handle{k: s.testKnobs()} }

func (h Handle) testKnobs() Knobs { return h.k }

// Session is what carries a Handle: a *etcdlock.Session or a
// *shard.Session.
type Session interface{ testKnobs() Knobs }

// The knobs of a session, as functions of it.

func SetHook(s Session, h Hook)                  { s.testKnobs().SetHook(h) }
func SetMonitorDelay(s Session, d time.Duration) { s.testKnobs().SetMonitorDelay(d) }
func Expire(s Session, cause error, reason string) {
	s.testKnobs().Expire(cause, reason)
}
func RunOutClock(s Session)     { s.testKnobs().RunOutClock() }
func ReaperIdle(s Session) bool { return s.testKnobs().ReaperIdle() }
func BarrierGuard(s Session, dir string) clientv3.Cmp {
	return s.testKnobs().BarrierGuard(dir)
}
func RaiseBarrier(ctx context.Context, s Session, dir string) error {
	return s.testKnobs().RaiseBarrier(ctx, dir)
}
func BarrierRev(s Session, dir string) int64 { return s.testKnobs().BarrierRev(dir) }
func LentConn(s Session) (lent, leader bool) { return s.testKnobs().LentConn() }
func HoldKeeper(s Session) (release func())  { return s.testKnobs().HoldKeeper() }
func Lend(s Session, cli *clientv3.Client, conn *grpc.ClientConn, addr string) (retire func()) {
	return s.testKnobs().Lend(cli, conn, addr)
}
func BeforeSend(s Session, f func(dirs []string)) { s.testKnobs().BeforeSend(f) }
func Pending(s Session) int                       { return s.testKnobs().Pending() }
func BatchLimits(s Session) (ops, bytes int)      { return s.testKnobs().BatchLimits() }

// SessionOf returns the session of the innermost grant ctx carries (a
// Lock's or a Leadership's Context, or one derived from it), and true;
// false when it carries none. Package etcdlock sets it.
var SessionOf func(ctx context.Context) (Session, bool)

// The parts of the key layout that internal/layout does not hold (the
// rest, tests take from it).
var (
	ListPage    int // the page size of List and Describe
	TagMutex    string
	TagElection string
	WaiterKey   func(dir, tag string, lease clientv3.LeaseID, slot int) string
	BarrierKey  func(dir string, lease clientv3.LeaseID) string
	EncodeValue func(identity, value string, at, granted time.Time) string
	// DecodeValue returns the value a key's stored value carries.
	DecodeValue func(b []byte) string
)

// The keeper, its connections and the lease.
var (
	AttemptTimeout time.Duration
	RevokeAttempt  time.Duration
	ErrUnanswered  error // why the keeper leaves an endpoint that does not answer
	// StreamConn wraps conn as the keeper would lend it.
	StreamConn func(cli *clientv3.Client, conn *grpc.ClientConn) (borrow func() bool, retire, giveBack func(), kv clientv3.KV)
	// GrantLease grants a lease as NewSession does (idempotent retries).
	GrantLease func(ctx context.Context, cli *clientv3.Client, secs int64) (clientv3.LeaseID, time.Duration, error)
)

// BatchBytes is a client's batcher's default request size limit.
var BatchBytes int
