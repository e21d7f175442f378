package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/etcdlock/etcdlock/lockmetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsServer serves --metrics-addr: /metrics (the library's metrics and
// the process's) and /healthz (the session's health: 503 once it is lost or
// within a third of its TTL of running out).
type metricsServer struct {
	ln      net.Listener
	reg     *prometheus.Registry
	metrics *lockmetrics.Metrics
	srv     *http.Server
	done    chan struct{}
}

// listenMetrics binds addr at once, so a bad or taken address is a usage
// error before any lock is taken.
func (a *app) listenMetrics(addr string) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, exitf(exitUsage, "--metrics-addr: %v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := lockmetrics.New(reg)
	if err != nil {
		ln.Close()
		return nil, exitf(exitUsage, "--metrics-addr: %v", err)
	}
	a.logf("serving metrics on http://%s/metrics and health on /healthz", ln.Addr())
	return &metricsServer{ln: ln, reg: reg, metrics: m, done: make(chan struct{})}, nil
}

// serve starts serving, with s's health on /healthz; logf reports a failure.
func (ms *metricsServer) serve(s acquire.Session, logf func(string, ...any)) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(ms.reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", health(s, s.TTL()/3))
	ms.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(ms.done)
		if err := ms.srv.Serve(ms.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("warning: metrics server stopped: %v (the command goes on)", err)
		}
	}()
}

// stop shuts the server down (or closes the listener if it never served).
func (ms *metricsServer) stop() {
	if ms.srv == nil {
		ms.ln.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = ms.srv.Shutdown(ctx)
	<-ms.done
}

// health is etcdlock.SessionHealth of s; of a sharded s (no lease of its
// own), the same check of its ValidUntil, the earliest of its clusters'.
func health(s acquire.Session, headroom time.Duration) http.Handler {
	if ps, ok := acquire.Unwrap(s); ok {
		return etcdlock.NewSessionHealth(ps, headroom)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Err(); err != nil {
			http.Error(w, fmt.Sprintf("sharded session: %v", err), http.StatusServiceUnavailable)
			return
		}
		left := time.Until(s.ValidUntil())
		if left <= headroom {
			http.Error(w, fmt.Sprintf("sharded session: valid for only %v (want more than %v)", left.Round(time.Millisecond), headroom), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: sharded session valid for %v\n", left.Round(time.Millisecond))
	})
}
