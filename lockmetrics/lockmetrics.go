// Package lockmetrics exposes etcdlock's events as Prometheus metrics. The
// root package never imports client_golang; it reports to an
// etcdlock.Observer, which Metrics implements:
//
//	m, err := lockmetrics.New(prometheus.DefaultRegisterer)
//	...
//	s, err := etcdlock.NewSession(ctx, cli, etcdlock.WithObserver(m))
//
// Nothing is registered until New is called. New registers the collectors
// once per registry: calling it again with the same registry returns the
// same Metrics, so any number of sessions can share them.
//
// Metrics (all prefixed etcdlock_):
//
//	acquisitions_total{kind,name,result}      counter   Lock/Acquire/RLock/Campaign/Try* calls by result
//	                                                    (granted, timeout, canceled, locked, error)
//	wait_seconds{kind,name}                   histogram time from the call to its grant
//	hold_seconds{kind,name}                   histogram time from grant to release or loss
//	held{kind,name}                           gauge     grants this process holds now
//	waiters{kind,name}                        gauge     calls of this process waiting for a key ahead
//	grants_lost_total{kind,name,cause}        counter   grants that ended other than by release
//	                                                    (session_expired, session_closed, lock_lost)
//	sessions_ended_total{reason}              counter   sessions lost or closed, by reason
//	                                                    (lease_gone, validity_clock, client_closed, slow_grant, closed)
//	keepalive_rtt_seconds                     histogram round trip of acknowledged keepalives
//	validity_headroom_seconds                 histogram how far ValidUntil is ahead after each keepalive
//	leadership_transitions_total{name,event}  counter   gained, resigned, lost
//	leader{name}                              gauge     1 while this process leads the election
//
// Lock names can be unbounded (a name per job or per customer); WithoutNames
// replaces every name label with "" to bound the cardinality.
package lockmetrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/prometheus/client_golang/prometheus"
)

// Option configures New.
type Option func(*config)

type config struct{ names bool }

// WithoutNames drops lock names from the labels (every name label is "").
func WithoutNames() Option { return func(c *config) { c.names = false } }

// Metrics is an etcdlock.Observer that updates Prometheus collectors. It is
// safe for concurrent use.
type Metrics struct {
	etcdlock.NopObserver
	names bool

	acquisitions *prometheus.CounterVec
	wait, hold   *prometheus.HistogramVec
	held         *prometheus.GaugeVec
	waiters      *prometheus.GaugeVec
	lost         *prometheus.CounterVec
	sessions     *prometheus.CounterVec
	rtt          prometheus.Histogram
	headroom     prometheus.Histogram
	transitions  *prometheus.CounterVec
	leader       *prometheus.GaugeVec
	batchSize    prometheus.Histogram
	batches      prometheus.Counter
}

var registered = struct {
	sync.Mutex
	m map[prometheus.Registerer]*Metrics
}{m: map[prometheus.Registerer]*Metrics{}}

// New returns the Metrics registered on reg, registering them the first
// time. Options apply only to that first call; a later call with different
// options returns an error. A nil reg is an error.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("lockmetrics: nil registerer")
	}
	c := config{names: true}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("lockmetrics: nil option")
		}
		o(&c)
	}
	registered.Lock()
	defer registered.Unlock()
	if m := registered.m[reg]; m != nil {
		if m.names != c.names {
			return nil, errors.New("lockmetrics: already registered on this registry with other options")
		}
		return m, nil
	}
	m := build(c)
	for _, col := range m.collectors() {
		if err := reg.Register(col); err != nil {
			for _, done := range m.collectors() {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("lockmetrics: register: %w", err)
		}
	}
	registered.m[reg] = m
	return m, nil
}

func build(c config) *Metrics {
	const ns = "etcdlock"
	lockLabels := []string{"kind", "name"}
	waitBuckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	return &Metrics{
		names: c.names,
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "acquisitions_total",
			Help: "Lock, Acquire, RLock, Campaign and Try calls by result."}, []string{"kind", "name", "result"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "wait_seconds",
			Help: "Time from a call to its grant.", Buckets: waitBuckets}, lockLabels),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "hold_seconds",
			Help: "Time from a grant to its release or loss.", Buckets: waitBuckets}, lockLabels),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "held",
			Help: "Grants this process holds now."}, lockLabels),
		waiters: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "waiters",
			Help: "Calls of this process waiting for a key ahead of them."}, lockLabels),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "grants_lost_total",
			Help: "Grants that ended other than by release, by cause."}, []string{"kind", "name", "cause"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sessions_ended_total",
			Help: "Sessions lost or closed, by reason."}, []string{"reason"}),
		rtt: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "keepalive_rtt_seconds",
			Help: "Round trip of acknowledged keepalives.", Buckets: prometheus.ExponentialBuckets(.0005, 2, 14)}),
		headroom: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "validity_headroom_seconds",
			Help: "How far ValidUntil is ahead after each acknowledged keepalive.", Buckets: []float64{.5, 1, 2, 3, 5, 7, 10, 15, 30, 60}}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "leadership_transitions_total",
			Help: "Leadership gained, resigned or lost by this process."}, []string{"name", "event"}),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "leader",
			Help: "1 while this process leads the election."}, []string{"name"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "batch_size",
			Help: "Writes per etcd commit (group commit), observed once per write.", Buckets: prometheus.ExponentialBuckets(1, 2, 8)}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "batches_total",
			Help: "etcd commits of this process's writes (each write counts 1/its batch's size)."}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquisitions, m.wait, m.hold, m.held, m.waiters, m.lost, m.sessions,
		m.rtt, m.headroom, m.transitions, m.leader, m.batchSize, m.batches}
}

func (m *Metrics) name(n string) string {
	if m.names {
		return n
	}
	return ""
}

// Acquired implements etcdlock.Observer.
func (m *Metrics) Acquired(e etcdlock.AcquireEvent) {
	name := m.name(e.Name)
	m.acquisitions.WithLabelValues(e.Kind, name, e.Result).Inc()
	if e.Result != etcdlock.ResultGranted {
		return
	}
	m.wait.WithLabelValues(e.Kind, name).Observe(e.Wait.Seconds())
	m.held.WithLabelValues(e.Kind, name).Inc()
	if e.Kind == "election" {
		m.transitions.WithLabelValues(name, "gained").Inc()
		m.leader.WithLabelValues(name).Inc()
	}
}

// Released implements etcdlock.Observer.
func (m *Metrics) Released(e etcdlock.ReleaseEvent) {
	name := m.name(e.Name)
	m.hold.WithLabelValues(e.Kind, name).Observe(e.Held.Seconds())
	m.held.WithLabelValues(e.Kind, name).Dec()
	released := errors.Is(e.Cause, etcdlock.ErrReleased)
	if !released {
		m.lost.WithLabelValues(e.Kind, name, causeLabel(e.Cause)).Inc()
	}
	if e.Kind == "election" {
		event := "lost"
		if released {
			event = "resigned"
		}
		m.transitions.WithLabelValues(name, event).Inc()
		m.leader.WithLabelValues(name).Dec()
	}
}

func causeLabel(err error) string {
	switch {
	case errors.Is(err, etcdlock.ErrSessionClosed):
		return "session_closed"
	case errors.Is(err, etcdlock.ErrSessionExpired):
		return "session_expired"
	case errors.Is(err, etcdlock.ErrLockLost):
		return "lock_lost"
	}
	return "other"
}

// Waiting implements etcdlock.Observer.
func (m *Metrics) Waiting(kind, name string, delta int) {
	m.waiters.WithLabelValues(kind, m.name(name)).Add(float64(delta))
}

// SessionEnded implements etcdlock.Observer.
func (m *Metrics) SessionEnded(e etcdlock.SessionEvent) {
	m.sessions.WithLabelValues(e.Reason).Inc()
}

// KeepaliveAcked implements etcdlock.Observer.
func (m *Metrics) KeepaliveAcked(rtt, headroom time.Duration) {
	m.rtt.Observe(rtt.Seconds())
	m.headroom.Observe(headroom.Seconds())
}

// Batched implements etcdlock.Observer.
func (m *Metrics) Batched(size int) {
	if size < 1 {
		return
	}
	m.batchSize.Observe(float64(size))
	m.batches.Add(1 / float64(size))
}
