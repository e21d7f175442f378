//go:build linux

package safety

// This file is the worker: the test binary re-executed as a child process
// (TestMain runs it when envRole is set), so the harness can SIGSTOP and
// SIGKILL it for real. It talks to the harness over its stdout and stdin, one
// line per message, every time stamped with monoNow (CLOCK_MONOTONIC is the
// same clock in every process):
//
//	SESSION <lease hex>                    a new session
//	SESSION_LOST <lease hex> <reason>       a session was lost (its Observer; Run's too)
//	LEASE_ALIVE <lease hex> <t>             TimeToLive sent at t found the lease alive (before a Close)
//	ENQ <t>                                 Lock (Campaign) called
//	GRANT <token> <key> <t>                 Lock returned (lead called)
//	LOCKERR <t> <error>                     Lock (Run) failed
//	LOCKLOST <lease hex> <t> alive|unknown  ... with ErrLockLost: its key was deleted while it waited
//	                                        (alive: TimeToLive then found the lease alive)
//	READ <token> <call> <return> ok <v>     the read was admitted and returned v
//	READ <token> <call> <return> stale|err  the read was refused, or failed
//	ABOUT_TO_WRITE <token> <v>              read done; waits for GO before writing v+1
//	WROTE <token> <call> <return> ok|stale|unknown|skipped
//	UNLOCK <token> <t>                      about to call Unlock (lead about to return)
//	UNLOCKED <token> ok|<error>
//	STATUS <t> <state> <frames>             where its main goroutine is (asked by STATUS)
//
// The harness answers every ABOUT_TO_WRITE with one "GO" line, possibly after
// it has stopped the worker (a pause inside the critical section that cannot
// race with the write). When stdin closes, the worker finishes what it is
// doing, closes its session and exits 0. The library's log goes to stderr
// (see workerreport_test.go).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Environment of a worker process.
const (
	envRole      = "ETCDLOCK_SAFETY_WORKER" // roleRegister, roleEtcd or roleElection
	envEndpoints = "ETCDLOCK_SAFETY_ENDPOINTS"
	envName      = "ETCDLOCK_SAFETY_NAME"      // the lock (election) name
	envTTL       = "ETCDLOCK_SAFETY_TTL"       // session TTL
	envTarget    = "ETCDLOCK_SAFETY_TARGET"    // the register's URL, or the counter's key
	envID        = "ETCDLOCK_SAFETY_ID"        // identity
	envUnbatched = "ETCDLOCK_SAFETY_UNBATCHED" // "1": sessions use WithoutBatching
	envRotate    = "ETCDLOCK_SAFETY_ROTATE"    // a session's lifetime, after which the worker closes it and opens another ("": none)
)

// Worker roles.
const (
	roleRegister = "register" // Mutex + fenced HTTP register
	roleEtcd     = "etcd"     // Mutex + counter in etcd behind Lock.Guard
	roleElection = "election" // Election.Run + fenced HTTP register
	roleRW       = "rw"       // RWMutex writers (Fence.Admit) and readers (Fence.AdmitShared) + fenced HTTP register
)

// opTimeout bounds each read and write of the resource.
const opTimeout = 5 * time.Second

// resource is what a worker increments.
type resource interface {
	// read returns the value and "ok", or "stale" (refused), or "err".
	read(ctx context.Context, l guarded) (int64, string)
	// write writes v and returns "ok", "stale" (refused) or "unknown".
	write(ctx context.Context, l guarded, v int64) string
}

// guarded is a grant: a Lock or a Leadership.
type guarded interface {
	Token() etcdlock.Token
	Guard() clientv3.Cmp
}

type worker struct {
	ctx    context.Context
	cancel context.CancelFunc
	cli    *clientv3.Client
	res    resource
	name   string
	id     string
	ttl    time.Duration
	opts   []etcdlock.SessionOption // of every session
	rotate time.Duration            // envRotate; 0: keep a session until it is lost
	goCh   chan struct{}
	// cancels bounds Locks when the harness's late-write scenario (see
	// lateHold) asks, to cancel a Lock whose enqueue may be held in a
	// network path.
	cancels lockCanceler

	outMu sync.Mutex
	out   *bufio.Writer

	sess      *etcdlock.Session
	sessSince time.Time // when sess was opened
}

func runWorker(role string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		return fail(err)
	}
	cli, err := clientv3.New(workerClientConfig(strings.Split(os.Getenv(envEndpoints), ","), role))
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &worker{ctx: ctx, cancel: cancel, cli: cli, name: os.Getenv(envName), id: os.Getenv(envID),
		ttl: ttl, goCh: make(chan struct{}, 4), out: bufio.NewWriter(os.Stdout),
		opts: []etcdlock.SessionOption{etcdlock.WithTTL(ttl), etcdlock.WithIdentity(os.Getenv(envID)),
			etcdlock.WithLogger(workerLogger())}}
	w.opts = append(w.opts, etcdlock.WithObserver(reporter{w: w}))
	w.cancels.w = w
	if v := os.Getenv(envRotate); v != "" {
		if w.rotate, err = time.ParseDuration(v); err != nil {
			return fail(err)
		}
	}
	if os.Getenv(envUnbatched) == "1" {
		w.opts = append(w.opts, etcdlock.WithoutBatching())
	}
	target := os.Getenv(envTarget)
	switch role {
	case roleRegister, roleElection, roleRW:
		w.res = &httpRegister{url: target, c: &http.Client{Timeout: opTimeout}}
	case roleEtcd:
		w.res = &etcdCounter{cli: cli, key: target}
	default:
		return fail(fmt.Errorf("unknown role %q", role))
	}
	go w.readStdin()
	switch role {
	case roleElection:
		w.runElection()
	case roleRW:
		w.runRW()
	default:
		w.runMutex()
	}
	if w.sess != nil {
		w.closeSession()
	}
	return 0
}

// closeSession closes w.sess, first saying LEASE_ALIVE if etcd finds its
// lease alive: whatever of the lease went before then went while it lived.
func (w *worker) closeSession() {
	t := monoNow()
	if w.leaseAlive(w.sess.Lease()) {
		w.say("LEASE_ALIVE %x %d", int64(w.sess.Lease()), t)
	}
	_ = w.sess.Close()
	w.sess = nil
}

// workerKeepAlive is the workers' gRPC keepalive time: longer than a hold
// of their link (see linkLane), so that a held path stays in their
// balancer's rotation for the whole hold, as a slow path does (etcd's own
// client sends no keepalive pings by default). With embedtest's 2 s the
// client drops the held connection about 4 s into a hold, and only what it
// sent until then is delivered late. Every other fault closes connections.
const workerKeepAlive = lateHoldMax + 5*time.Second

// workerClientConfig is embedtest's client configuration (Cluster.ClientConfig),
// rebuilt in the child from the endpoints, with a keepalive time of
// workerKeepAlive; the guarded-etcd cell's workers keep embedtest's 2 s (its
// resource is etcd itself: a held path kept in rotation starves it).
func workerClientConfig(endpoints []string, role string) clientv3.Config {
	keepAlive := workerKeepAlive
	if role == roleEtcd {
		keepAlive = 2 * time.Second
	}
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    keepAlive,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2,
					MaxDelay: time.Second},
				MinConnectTimeout: 5 * time.Second,
			}),
		},
	}
}

// readStdin turns "GO" lines into goCh sends, "CANCEL D" lines into a
// bound D on the Lock in progress or the next (see lockCanceler) and
// "STATUS" into a STATUS line; end of input ends the worker.
func (w *worker) readStdin() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 1 && f[0] == "GO":
			w.goCh <- struct{}{}
		case len(f) == 2 && f[0] == "CANCEL":
			if d, err := time.ParseDuration(f[1]); err == nil {
				w.cancels.request(d)
			}
		case len(f) == 1 && f[0] == "STATUS":
			w.sayStatus()
		}
	}
	w.cancel()
}

func (w *worker) say(format string, args ...any) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Fprintf(w.out, format+"\n", args...)
	_ = w.out.Flush()
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// session returns a live session, opening a new one when the last was lost;
// nil (after a short wait) when it cannot.
func (w *worker) session() *etcdlock.Session {
	if w.sess != nil && w.sess.Err() == nil && w.rotate > 0 && time.Since(w.sessSince) > w.rotate {
		// A steady worker's process "restarts" now and then: a key of its
		// session that nobody holds (a phantom) stays only until then.
		w.closeSession()
	}
	if w.sess != nil && w.sess.Err() == nil {
		return w.sess
	}
	if w.sess != nil { // lost (its Observer said SESSION_LOST)
		_ = w.sess.Close()
		w.sess = nil
	}
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	s, err := etcdlock.NewSession(ctx, w.cli, w.opts...)
	if err != nil {
		if w.ctx.Err() == nil {
			w.say("SESSIONERR %s", oneLine(err))
			sleepCtx(w.ctx, 200*time.Millisecond)
		}
		return nil
	}
	w.sess, w.sessSince = s, time.Now()
	w.say("SESSION %x", int64(s.Lease()))
	return s
}

func (w *worker) runMutex() {
	for w.ctx.Err() == nil {
		s := w.session()
		if s == nil {
			continue
		}
		w.say("ENQ %d", monoNow())
		// No timeout, unless the harness asks for one (CANCEL): a Lock
		// that fails with its session alive would be a finding (the FIFO
		// checker relies on it).
		lctx, end := w.cancels.begin(int64(s.Lease()))
		l, err := etcdlock.NewMutex(s, w.name).Lock(lctx)
		canceled := lctx.Err() != nil
		bounded := end()
		switch {
		case err != nil && bounded && canceled && w.ctx.Err() == nil:
			w.say("CANCELED %x %d", int64(s.Lease()), monoNow())
			continue
		case err != nil:
			if w.ctx.Err() == nil {
				w.lockErr(s, err)
			}
			continue
		case bounded:
			w.say("CANCELED %x %d", int64(s.Lease()), monoNow()) // granted first: nothing was given up
		}
		w.say("GRANT %d %s %d", l.Token(), l.Key(), monoNow())
		w.incr(l)
		w.say("UNLOCK %d %d", l.Token(), monoNow())
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err = l.Unlock(ctx)
		cancel()
		status := "ok"
		if err != nil {
			status = oneLine(err)
		}
		w.say("UNLOCKED %d %s", l.Token(), status)
	}
}

func (w *worker) runElection() {
	for w.ctx.Err() == nil {
		s := w.session()
		if s == nil {
			continue
		}
		err := etcdlock.NewElection(s, w.name).Run(w.ctx, w.id, func(lctx context.Context) error {
			l, ok := etcdlock.LeadershipFromContext(lctx)
			if !ok {
				return errors.New("no leadership in lead's context")
			}
			w.say("GRANT %d %s %d", l.Token(), l.Key(), monoNow())
			// A few heartbeats, then step down so that leadership moves on.
			for i, n := 0, 3+rand.IntN(8); i < n && lctx.Err() == nil && w.ctx.Err() == nil; i++ {
				w.incr(l)
				sleepCtx(lctx, 20*time.Millisecond)
			}
			w.say("UNLOCK %d %d", l.Token(), monoNow())
			return nil
		})
		if err != nil && w.ctx.Err() == nil {
			w.say("LOCKERR %d %s", monoNow(), oneLine(err))
			sleepCtx(w.ctx, 100*time.Millisecond)
		}
	}
}

// incr reads the value with the grant's token and writes value+1 with it,
// after the harness's GO. It does not look at whether the grant is still
// current before writing: that is the resource's job (fencing).
func (w *worker) incr(l guarded) {
	tok := l.Token()
	rc := monoNow()
	v, st := w.res.read(w.ctx, l)
	rr := monoNow()
	w.say("READ %d %d %d %s %d", tok, rc, rr, st, v)
	if st != "ok" {
		return
	}
	w.say("ABOUT_TO_WRITE %d %d", tok, v)
	select {
	case <-w.goCh:
	case <-w.ctx.Done():
		w.say("WROTE %d 0 0 skipped", tok)
		return
	}
	wc := monoNow()
	st = w.res.write(context.Background(), l, v+1)
	w.say("WROTE %d %d %d %s", tok, wc, monoNow(), st)
}

// lockErr reports a failed Lock of session s: LOCKERR, and LOCKLOST when
// the error says the waiter's key was deleted by someone else.
func (w *worker) lockErr(s *etcdlock.Session, err error) {
	t := monoNow()
	w.say("LOCKERR %d %s", t, oneLine(err))
	if errors.Is(err, etcdlock.ErrLockLost) {
		alive := "unknown"
		if w.leaseAlive(s.Lease()) {
			alive = "alive"
		}
		w.say("LOCKLOST %x %d %s", int64(s.Lease()), t, alive)
	}
}

// leaseAlive reports whether etcd says lease is alive (TimeToLive, which
// the leader answers); false when it is gone or the question fails.
func (w *worker) leaseAlive(lease clientv3.LeaseID) bool {
	// Not w.ctx: the worker asks this on its way out, too.
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	resp, err := w.cli.TimeToLive(ctx, lease)
	return err == nil && resp.TTL > 0
}

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	<-sctx.Done()
	return ctx.Err() == nil
}
