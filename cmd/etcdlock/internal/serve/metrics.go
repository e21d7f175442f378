package serve

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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

// metricsHandler serves /metrics. Its series name every lock and
// election the server's callers took, whoever they are: with client-auth,
// only a caller whose etcd user may read every key sees them (a user RBAC
// keeps to a prefix gets permission_denied).
func (srv *Server) metricsHandler() http.Handler {
	h := promhttp.HandlerFor(srv.reg, promhttp.HandlerOpts{})
	if srv.users == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A range over every key, one key at most, checks the permission.
		_, err := principalOf(r).cli.Get(r.Context(), "\x00", clientv3.WithFromKey(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
		if err != nil {
			srv.writeError(w, classify(err))
			return
		}
		h.ServeHTTP(w, r)
	})
}
