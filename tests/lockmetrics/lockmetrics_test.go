package lockmetrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/lockmetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func setup(t *testing.T) (*clientv3.Client, func(opts ...etcdlock.SessionOption) *etcdlock.Session) {
	t.Helper()
	c := embedtest.Start(t)
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, func(opts ...etcdlock.SessionOption) *etcdlock.Session {
		t.Helper()
		s, err := etcdlock.NewSession(context.Background(), cli, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestScriptedSequence(t *testing.T) {
	cli, open := setup(t)
	reg := prometheus.NewRegistry()
	m := newOnce(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s1 := open(etcdlock.WithObserver(m))
	s2 := open(etcdlock.WithObserver(m))

	const name = "jobs/nightly"
	scriptMutex(t, ctx, cli, reg, name, s1, s2)
	scriptElection(t, ctx, reg, s1)

	v0 := s1.ValidUntil()
	await(t, "a keepalive", func() bool { return s1.ValidUntil().After(v0) })
	await(t, "the releases to be counted", func() bool {
		return testutil.ToFloat64(mustVec(t, reg, "etcdlock_held", "mutex", name)) == 0 &&
			testutil.ToFloat64(mustVec(t, reg, "etcdlock_leader", "svc")) == 0
	})

	if err := testutil.GatherAndCompare(reg, strings.NewReader(scriptedWant),
		"etcdlock_acquisitions_total", "etcdlock_grants_lost_total", "etcdlock_held", "etcdlock_leader",
		"etcdlock_leadership_transitions_total", "etcdlock_sessions_ended_total", "etcdlock_waiters"); err != nil {
		t.Fatal(err)
	}
	// Histograms: 3 grants waited, 3 grants ended, keepalives acknowledged.
	if n := testutil.CollectAndCount(reg, "etcdlock_wait_seconds"); n != 2 {
		t.Fatalf("wait_seconds series: %d", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), "etcdlock_keepalive_rtt_seconds"); err == nil {
		t.Fatal("no keepalive round trips recorded")
	}
}

// newOnce makes the Metrics of reg, and checks that a second New on reg
// returns them, one with other options fails, and so does New(nil).
func newOnce(t *testing.T, reg *prometheus.Registry) *lockmetrics.Metrics {
	t.Helper()
	m, err := lockmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := lockmetrics.New(reg)
	if err != nil || again != m {
		t.Fatalf("second New on one registry: %p %v, want the same Metrics", again, err)
	}
	if _, err := lockmetrics.New(reg, lockmetrics.WithoutNames()); err == nil {
		t.Fatal("New with other options on the same registry succeeded")
	}
	if _, err := lockmetrics.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	return m
}

// scriptMutex, on name: s1 is granted it; s2 finds it locked, times out,
// is canceled, then waits (the waiters gauge shows it) and is granted it
// when s1 unlocks; then s2's lease is revoked, so its grant and session are
// lost.
func scriptMutex(t *testing.T, ctx context.Context, cli *clientv3.Client, reg *prometheus.Registry, name string, s1, s2 *etcdlock.Session) {
	t.Helper()
	l, err := etcdlock.NewMutex(s1, name).Lock(ctx) // granted
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdlock.NewMutex(s2, name).TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) { // locked
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := etcdlock.NewMutex(s2, name).Lock(short); !errors.Is(err, context.DeadlineExceeded) { // timeout
		t.Fatal(err)
	}
	dead, cancelDead := context.WithCancel(ctx)
	cancelDead()
	if _, err := etcdlock.NewMutex(s2, name).Lock(dead); !errors.Is(err, context.Canceled) { // canceled
		t.Fatal(err)
	}
	// A waiter shows in the gauge while it waits.
	got := make(chan *etcdlock.Lock, 1)
	go func() {
		w, err := etcdlock.NewMutex(s2, name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	await(t, "the waiters gauge", func() bool {
		return testutil.ToFloat64(mustVec(t, reg, "etcdlock_waiters", "mutex", name)) == 1
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	// Lose the waiter-turned-holder: revoke its session's lease.
	wctx := w.Context()
	if _, err := cli.Revoke(ctx, s2.Lease()); err != nil {
		t.Fatal(err)
	}
	<-wctx.Done()
	<-s2.Done()
}

// scriptElection: s1 gains leadership of svc (the leader gauge shows it)
// and resigns.
func scriptElection(t *testing.T, ctx context.Context, reg *prometheus.Registry, s1 *etcdlock.Session) {
	t.Helper()
	lead, err := etcdlock.NewElection(s1, "svc").Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(mustVec(t, reg, "etcdlock_leader", "svc")); v != 1 {
		t.Fatalf("leader gauge %v while leading", v)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// scriptedWant is what TestScriptedSequence's registry holds at its end,
// but for the histograms.
const scriptedWant = `
# HELP etcdlock_acquisitions_total Lock, Acquire, RLock, Campaign and Try calls by result.
# TYPE etcdlock_acquisitions_total counter
etcdlock_acquisitions_total{kind="election",name="svc",result="granted"} 1
etcdlock_acquisitions_total{kind="mutex",name="jobs/nightly",result="canceled"} 1
etcdlock_acquisitions_total{kind="mutex",name="jobs/nightly",result="granted"} 2
etcdlock_acquisitions_total{kind="mutex",name="jobs/nightly",result="locked"} 1
etcdlock_acquisitions_total{kind="mutex",name="jobs/nightly",result="timeout"} 1
# HELP etcdlock_grants_lost_total Grants that ended other than by release, by cause.
# TYPE etcdlock_grants_lost_total counter
etcdlock_grants_lost_total{cause="session_expired",kind="mutex",name="jobs/nightly"} 1
# HELP etcdlock_held Grants this process holds now.
# TYPE etcdlock_held gauge
etcdlock_held{kind="election",name="svc"} 0
etcdlock_held{kind="mutex",name="jobs/nightly"} 0
# HELP etcdlock_leader 1 while this process leads the election.
# TYPE etcdlock_leader gauge
etcdlock_leader{name="svc"} 0
# HELP etcdlock_leadership_transitions_total Leadership gained, resigned or lost by this process.
# TYPE etcdlock_leadership_transitions_total counter
etcdlock_leadership_transitions_total{event="gained",name="svc"} 1
etcdlock_leadership_transitions_total{event="resigned",name="svc"} 1
# HELP etcdlock_sessions_ended_total Sessions lost or closed, by reason.
# TYPE etcdlock_sessions_ended_total counter
etcdlock_sessions_ended_total{reason="lease_gone"} 1
# HELP etcdlock_waiters Calls of this process waiting for a key ahead of them.
# TYPE etcdlock_waiters gauge
etcdlock_waiters{kind="mutex",name="jobs/nightly"} 0
`

func mustVec(t *testing.T, reg *prometheus.Registry, metric string, labels ...string) prometheus.Collector {
	t.Helper()
	return collectorFor{reg: reg, metric: metric, labels: labels}
}

// collectorFor exposes one series of a gathered registry as a Collector, for testutil.ToFloat64.
type collectorFor struct {
	reg    *prometheus.Registry
	metric string
	labels []string
}

func (c collectorFor) Describe(ch chan<- *prometheus.Desc) {}
func (c collectorFor) Collect(ch chan<- prometheus.Metric) {
	mfs, err := c.reg.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		if mf.GetName() != c.metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(c.labels) {
				continue
			}
			match := true
			// Labels come sorted by name: kind, name (the order callers pass).
			for i, lp := range m.GetLabel() {
				if lp.GetValue() != c.labels[i] {
					match = false
				}
			}
			if !match {
				continue
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(c.metric, "", nil, nil), prometheus.GaugeValue, v)
			return
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(c.metric, "", nil, nil), prometheus.GaugeValue, -1)
}

func TestWithoutNames(t *testing.T) {
	_, open := setup(t)
	reg := prometheus.NewRegistry()
	m, err := lockmetrics.New(reg, lockmetrics.WithoutNames())
	if err != nil {
		t.Fatal(err)
	}
	s := open(etcdlock.WithObserver(m))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"customer/1", "customer/2"} {
		l, err := etcdlock.NewMutex(s, name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(ctx)
	}
	want := `
# HELP etcdlock_acquisitions_total Lock, Acquire, RLock, Campaign and Try calls by result.
# TYPE etcdlock_acquisitions_total counter
etcdlock_acquisitions_total{kind="mutex",name="",result="granted"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "etcdlock_acquisitions_total"); err != nil {
		t.Fatal(err)
	}
}
