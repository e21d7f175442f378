// Command fenced-store serves a small fenced key-value store over HTTP: the
// resource side of etcdlock's fencing tokens. A write is admitted only if
// its token is at least the highest token the store has admitted for that
// key, so a lock holder that was paused past its lease cannot overwrite the
// work of the holder after it.
//
//	go run ./examples/fenced-store                  # listens on 127.0.0.1:8080
//	curl -i -X PUT -H 'Fencing-Token: 7' --data v1 http://127.0.0.1:8080/billing/nightly   # 204
//	curl -i -X PUT -H 'Fencing-Token: 5' --data v0 http://127.0.0.1:8080/billing/nightly   # 409
//	curl -i http://127.0.0.1:8080/billing/nightly                                          # v1, Fencing-Token: 7
//
// The store itself is the importable package
// github.com/etcdlock/etcdlock/examples/fenced-store/store; see
// docs/guarantees.md ("Checking tokens at the resource") for the same
// pattern in SQL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/examples/fenced-store/store"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "fenced-store:", err)
		os.Exit(1)
	}
}

// newHandler returns the store's HTTP handler, logging every PUT and its outcome.
func newHandler(logger *log.Logger) http.Handler {
	st := store.New()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		st.ServeHTTP(rec, r)
		if logger != nil && r.Method == http.MethodPut {
			logger.Printf("PUT %s token %q: %d %s", r.URL.Path, r.Header.Get(etcdlock.TokenHeader),
				rec.status, http.StatusText(rec.status))
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// serve listens on addr until ctx ends.
func serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	logger := log.New(os.Stderr, "", log.LstdFlags)
	srv := &http.Server{Handler: newHandler(logger), ReadHeaderTimeout: 10 * time.Second}
	logger.Printf("fenced store listening on http://%s", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
