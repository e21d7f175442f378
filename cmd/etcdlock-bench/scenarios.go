package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

const keepAliveMethod = "/etcdserverpb.Lease/LeaseKeepAlive"

// deadClient measures how long a lock stays held after its holder's client
// stops talking (its link is cut, as for a frozen or crashed process): the
// time until a waiter holds it, without and with an etcd leader failover.
func deadClient(ctx context.Context, c *embedtest.Cluster, o options) []Result {
	var out []Result
	for _, failover := range []bool{false, true} {
		d, err := deadOnce(ctx, c, o.ttl, failover)
		r := Result{Scenario: "dead client", Contestant: "etcdlock", Note: fmt.Sprintf("TTL %v, next holder after %.2fs", o.ttl, d.Seconds())}
		if failover {
			r.Note += ", leader killed right after the holder died"
		}
		if err != nil {
			r.Note = "error: " + err.Error()
		}
		out = append(out, r)
	}
	return out
}

func deadOnce(ctx context.Context, c *embedtest.Cluster, ttl time.Duration, failover bool) (time.Duration, error) {
	flaky, link, err := c.FlakyClient()
	if err != nil {
		return 0, err
	}
	defer flaky.Close()
	cli, err := c.Client()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	holder, err := etcdlock.NewSession(ctx, flaky, etcdlock.WithTTL(ttl))
	if err != nil {
		return 0, err
	}
	defer holder.Close()
	waiter, err := etcdlock.NewSession(ctx, cli, etcdlock.WithTTL(ttl))
	if err != nil {
		return 0, err
	}
	defer waiter.Close()
	name := fmt.Sprintf("bench/dead/%v/%d", failover, time.Now().UnixNano())
	if _, err := etcdlock.NewMutex(holder, name).Lock(ctx); err != nil {
		return 0, err
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := etcdlock.NewMutex(waiter, name).Lock(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dead client waiter:", err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Unlock(ctx)
	}()
	for {
		st, err := etcdlock.Describe(ctx, cli, name)
		if err == nil && len(st.Waiters) == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	link.Cut()
	died := time.Now()
	if failover {
		l, err := c.WaitLeader(ctx)
		if err != nil {
			return 0, err
		}
		if err := l.Kill(); err != nil {
			return 0, err
		}
		defer func() { _ = l.Restart() }()
	}
	at := <-got
	link.Restore()
	if at.IsZero() {
		return 0, fmt.Errorf("the waiter failed")
	}
	return at.Sub(died), nil
}

// failover kills the etcd leader while grants flow and reports the longest
// gap between grants.
func failover(ctx context.Context, c *embedtest.Cluster, o options) []Result {
	cli, err := c.Client()
	if err != nil {
		return []Result{{Scenario: "failover", Note: err.Error()}}
	}
	defer cli.Close()
	s, err := etcdlock.NewSession(ctx, cli)
	if err != nil {
		return []Result{{Scenario: "failover", Note: err.Error()}}
	}
	defer s.Close()
	var mu sync.Mutex
	var times []time.Time
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	const workers = 4
	for i := 0; i < workers; i++ {
		m := etcdlock.NewMutex(s, fmt.Sprintf("bench/failover/%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				l, err := m.Lock(wctx)
				if err != nil {
					continue
				}
				mu.Lock()
				times = append(times, time.Now())
				mu.Unlock()
				_ = l.Unlock(wctx)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		cancel()
		wg.Wait()
		return []Result{{Scenario: "failover", Note: err.Error()}}
	}
	killed := time.Now()
	_ = leader.Kill()
	time.Sleep(5 * time.Second)
	cancel()
	wg.Wait()
	_ = leader.Restart()
	var gap time.Duration
	var before, after int
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d > gap && times[i].After(killed) {
			gap = d
		}
	}
	for _, t := range times {
		if t.Before(killed) {
			before++
		} else {
			after++
		}
	}
	return []Result{{Scenario: "failover", Workers: workers, Contestant: "etcdlock",
		Note: fmt.Sprintf("leader killed: longest gap between grants %.2fs; %d grants in 2s before, %d in 5s after", gap.Seconds(), before, after)}}
}

// scale holds o.sessions sessions and o.locks locks (each grant with its
// loss watch) for o.hold over a few shared client connections, then does the
// same with etcd's concurrency.Session (no locks) on a fresh cluster.
func scale(ctx context.Context, c *embedtest.Cluster, o options) []Result {
	out := []Result{scaleOurs(ctx, c, o)}
	fresh, err := embedtest.New(ctx, embedtest.WithMembers(o.members), embedtest.WithFsync(o.fsync))
	if err != nil {
		return append(out, Result{Scenario: "scale", Contestant: "etcd", Note: err.Error()})
	}
	defer fresh.Close()
	return append(out, scaleEtcd(ctx, fresh, o))
}

const scaleClients = 8

// scaleClientsOf opens the few client connections a fleet's process shares.
func scaleClientsOf(c *embedtest.Cluster) ([]*clientv3.Client, func(), error) {
	clis := make([]*clientv3.Client, 0, scaleClients)
	closeAll := func() {
		for _, cli := range clis {
			cli.Close()
		}
	}
	for range scaleClients {
		cli, err := c.Client()
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clis = append(clis, cli)
	}
	return clis, closeAll, nil
}

func keepalives(c *embedtest.Cluster) int64 {
	var n int64
	for _, m := range c.Members() {
		n += m.Calls(keepAliveMethod)
	}
	return n
}

func memMB() (heap, sys float64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20), float64(ms.Sys) / (1 << 20)
}

func scaleOurs(ctx context.Context, c *embedtest.Cluster, o options) Result {
	r := Result{Scenario: "scale", Contestant: "etcdlock"}
	clis, closeAll, err := scaleClientsOf(c)
	if err != nil {
		r.Note = err.Error()
		return r
	}
	defer closeAll()
	start := time.Now()
	sessions := make([]*etcdlock.Session, o.sessions)
	var failed atomic.Int64
	parallel(o.sessions, 64, func(i int) {
		s, err := etcdlock.NewSession(ctx, clis[i%len(clis)], etcdlock.WithTTL(o.ttl))
		if err != nil {
			failed.Add(1)
			return
		}
		sessions[i] = s
	})
	sessionsUp := time.Since(start)
	locks := make([]*etcdlock.Lock, o.locks)
	parallel(o.locks, 64, func(i int) {
		s := sessions[i%len(sessions)]
		if s == nil {
			failed.Add(1)
			return
		}
		l, err := etcdlock.NewMutex(s, fmt.Sprintf("bench/scale/%d", i)).Lock(ctx)
		if err != nil {
			failed.Add(1)
			return
		}
		_ = l.Context() // keep its loss watch
		locks[i] = l
	})
	setup := time.Since(start)
	heap, sys := memMB()
	goroutines := runtime.NumGoroutine()
	k0, t0 := keepalives(c), time.Now()
	time.Sleep(o.hold)
	rate := float64(keepalives(c)-k0) / time.Since(t0).Seconds()
	lost := 0
	for _, s := range sessions {
		if s == nil || s.Err() != nil {
			lost++
		}
	}
	r.Note = fmt.Sprintf("%d sessions (up in %.1fs), %d locks with loss watches, setup %.1fs, %d failed; held %v: %d sessions lost; "+
		"%d goroutines, Go heap %.0f MB, Go sys %.0f MB (client and embedded servers in one process); %.0f keepalives/s",
		o.sessions, sessionsUp.Seconds(), o.locks, setup.Seconds(), failed.Load(), o.hold, lost, goroutines, heap, sys, rate)
	parallel(len(sessions), 64, func(i int) {
		if sessions[i] != nil {
			_ = sessions[i].Close()
		}
	})
	return r
}

func scaleEtcd(ctx context.Context, c *embedtest.Cluster, o options) Result {
	r := Result{Scenario: "scale", Contestant: "etcd"}
	clis, closeAll, err := scaleClientsOf(c)
	if err != nil {
		r.Note = err.Error()
		return r
	}
	defer closeAll()
	start := time.Now()
	sessions := make([]*concurrency.Session, o.sessions)
	var failed atomic.Int64
	ttl := int((o.ttl + time.Second - 1) / time.Second)
	parallel(o.sessions, 64, func(i int) {
		s, err := concurrency.NewSession(clis[i%len(clis)], concurrency.WithTTL(ttl))
		if err != nil {
			failed.Add(1)
			return
		}
		sessions[i] = s
	})
	setup := time.Since(start)
	time.Sleep(o.hold)
	lost := 0
	for _, s := range sessions {
		if s == nil {
			lost++
			continue
		}
		select {
		case <-s.Done():
			lost++
		default:
		}
	}
	r.Note = fmt.Sprintf("%d concurrency.Sessions (no locks), setup %.1fs, %d failed; held %v: %d sessions lost", o.sessions, setup.Seconds(), failed.Load(), o.hold, lost)
	parallel(len(sessions), 64, func(i int) {
		if sessions[i] != nil {
			_ = sessions[i].Close()
		}
	})
	return r
}

// parallel runs f(0..n-1) on width goroutines.
func parallel(n, width int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < width; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// tombstones runs 16 etcdlock workers on one hot lock for 30 s, twice:
// without compaction and with a compaction every 5 s, and reports the grant
// rate in each 5 s window. Every acquisition writes a new key; etcd keeps a
// deleted key in its index until compaction, and a read of the queue walks
// every key of the name, deleted ones included.
func tombstones(ctx context.Context, c *embedtest.Cluster, o options) []Result {
	var out []Result
	for _, compact := range []bool{false, true} {
		cli, err := c.Client()
		if err != nil {
			return append(out, Result{Scenario: "tombstones", Note: err.Error()})
		}
		name := fmt.Sprintf("bench/tombstones/%v/%d", compact, time.Now().UnixNano())
		var grants atomic.Int64
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			s, err := etcdlock.NewSession(ctx, cli)
			if err != nil {
				cancel()
				return append(out, Result{Scenario: "tombstones", Note: err.Error()})
			}
			m := etcdlock.NewMutex(s, name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer s.Close()
				for wctx.Err() == nil {
					l, err := m.Lock(wctx)
					if err != nil {
						continue
					}
					grants.Add(1)
					_ = l.Unlock(context.Background())
				}
			}()
		}
		var windows []string
		last := int64(0)
		for w := 0; w < 6; w++ {
			select {
			case <-time.After(5 * time.Second):
			case <-wctx.Done():
			}
			g := grants.Load()
			windows = append(windows, fmt.Sprintf("%.0f", float64(g-last)/5))
			last = g
			if compact {
				if resp, err := cli.Get(ctx, "x"); err == nil {
					_, _ = cli.Compact(ctx, resp.Header.Revision)
				}
			}
		}
		cancel()
		wg.Wait()
		cli.Close()
		note := "no compaction"
		if compact {
			note = "compaction every 5s"
		}
		out = append(out, Result{Scenario: "tombstones", Workers: 16, Contestant: "etcdlock", Grants: last,
			Note: fmt.Sprintf("%s: grants/s per 5s window: %s", note, strings.Join(windows, ", "))})
	}
	return out
}

// Shape of the many scenario: a process with many workers on their own names
// that share a few sessions and clients (a job scheduler locking item ids).
const (
	manyWorkers  = 1024
	manySessions = 64
	manyClients  = 4
)

// many runs manyWorkers workers on their own names, sharing manySessions
// sessions on manyClients clients, with batching and without, alternating
// over the rounds.
func many(ctx context.Context, c *embedtest.Cluster, o options) []Result {
	modes := []struct {
		name string
		opts []etcdlock.SessionOption
	}{{"etcdlock", nil}, {"etcdlock-nobatch", []etcdlock.SessionOption{etcdlock.WithoutBatching()}}}
	type acc struct {
		grants int64
		took   time.Duration
		lat    []time.Duration
		stats  *batchStats
	}
	accs := make([]acc, len(modes))
	per := o.duration / time.Duration(o.rounds)
	for r := 0; r < o.rounds; r++ {
		for k := range modes {
			i := k
			if r%2 == 1 {
				i = len(modes) - 1 - k
			}
			if accs[i].stats == nil {
				accs[i].stats = &batchStats{sizes: map[int]int64{}}
			}
			g, took, lat, err := manyRound(ctx, c, per, fmt.Sprintf("many-r%d", r), accs[i].stats, modes[i].opts...)
			if err != nil {
				fmt.Fprintf(os.Stderr, "many %s: %v\n", modes[i].name, err)
			}
			accs[i].grants += g
			accs[i].took += took
			accs[i].lat = append(accs[i].lat, lat...)
		}
	}
	var out []Result
	for i, a := range accs {
		out = append(out, Result{Scenario: "many", Workers: manyWorkers, Contestant: modes[i].name, Grants: a.grants,
			PerSecond: float64(a.grants) / a.took.Seconds(), P50ms: pct(a.lat, 50), P99ms: pct(a.lat, 99),
			Note: fmt.Sprintf("%d sessions on %d clients; %s", manySessions, manyClients, a.stats.take())})
	}
	return out
}

func manyRound(ctx context.Context, c *embedtest.Cluster, d time.Duration, tag string, stats *batchStats, opts ...etcdlock.SessionOption) (int64, time.Duration, []time.Duration, error) {
	clis := make([]*clientv3.Client, 0, manyClients)
	defer func() {
		for _, cli := range clis {
			cli.Close()
		}
	}()
	for range manyClients {
		cli, err := c.Client()
		if err != nil {
			return 0, 0, nil, err
		}
		clis = append(clis, cli)
	}
	sessions := make([]*etcdlock.Session, manySessions)
	defer func() {
		for _, s := range sessions {
			if s != nil {
				_ = s.Close()
			}
		}
	}()
	for i := range sessions {
		s, err := etcdlock.NewSession(ctx, clis[i%len(clis)], append(opts, etcdlock.WithObserver(stats))...)
		if err != nil {
			return 0, 0, nil, err
		}
		sessions[i] = s
	}
	workers := make([]worker, manyWorkers)
	for i := range workers {
		workers[i] = &ourWorker{m: etcdlock.NewMutex(sessions[i%len(sessions)], fmt.Sprintf("bench/%s/%d", tag, i))}
	}
	return drive(ctx, workers, d)
}
