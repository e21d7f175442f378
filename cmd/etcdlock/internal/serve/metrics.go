package serve

import "github.com/prometheus/client_golang/prometheus"

// serverMetrics are the server's own metrics, beside the library's
// (lockmetrics) on /metrics.
type serverMetrics struct {
	streams  prometheus.Gauge       // open hold and campaign streams
	sessions prometheus.Gauge       // open sessions of /v1/sessions
	errors   *prometheus.CounterVec // error answers, by code
}

func newServerMetrics(reg prometheus.Registerer) (serverMetrics, error) {
	m := serverMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcdlock_serve_open_streams",
			Help: "Hold and campaign streams that hold a grant."}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcdlock_serve_sessions",
			Help: "Open sessions of /v1/sessions."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "etcdlock_serve_request_errors_total",
			Help: "Requests answered with an error, by its code."}, []string{"code"}),
	}
	for _, c := range []prometheus.Collector{m.streams, m.sessions, m.errors} {
		if err := reg.Register(c); err != nil {
			return serverMetrics{}, err
		}
	}
	return m, nil
}
