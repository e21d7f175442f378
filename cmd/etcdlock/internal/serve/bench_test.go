package serve

// Benchmarks of the server, against the library and etcd's own lock
// service in the same run:
//
//	go test -run '^$' -bench Grant -benchtime 3s ./cmd/etcdlock/internal/serve
//	go test -run '^$' -bench HeldStreams -benchtime 1x ./cmd/etcdlock/internal/serve
//
// BenchmarkHeldStreams opens 10,000 hold streams from a child process (each
// a connection of its own) and reports the server's memory per held stream.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
)

// benchClientEnv makes the test binary the client of BenchmarkHeldStreams:
// "ADDR N" opens N holds of distinct names on ADDR, 64 at a time, prints
// "HELD <seconds>" once all are granted and waits to be killed.
const benchClientEnv = "ETCDLOCK_SERVE_BENCH_CLIENT"

func benchClient(arg string) int {
	addr, ns, _ := strings.Cut(arg, " ")
	n, err := strconv.Atoi(ns)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	var bodies sync.Map
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				resp, err := c.Post("http://"+addr+"/v1/hold", "application/json",
					strings.NewReader(fmt.Sprintf(`{"name":"bench/held/%d"}`, i)))
				if err != nil {
					failed.Add(1)
					continue
				}
				if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.Contains(line, "granted") {
					failed.Add(1)
				}
				bodies.Store(i, resp.Body) // held open until the process dies
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		fmt.Fprintf(os.Stderr, "%d holds failed\n", f)
		return 1
	}
	fmt.Printf("HELD %.3f\n", time.Since(start).Seconds())
	select {}
}

// benchServer starts a one-member cluster and a server on TCP.
func benchServer(b *testing.B) (*embedtest.Cluster, *Server, string) {
	b.Helper()
	return startTestServer(b, Config{})
}

// startTestServer starts a one-member cluster and a server of cfg on TCP,
// stopped at cleanup.
func startTestServer(tb testing.TB, cfg Config) (*embedtest.Cluster, *Server, string) {
	tb.Helper()
	c := embedtest.Start(tb, embedtest.WithMembers(1))
	srv, addr := serveOn(tb, c.TestClient(tb), cfg)
	return c, srv, addr
}

// serveOn starts a server of cfg on cli, on TCP, stopped at cleanup; a
// cfg without State answers /v1/state with null.
func serveOn(tb testing.TB, cli *clientv3.Client, cfg Config) (*Server, string) {
	tb.Helper()
	if cfg.State == nil {
		cfg.State = func(context.Context, *clientv3.Client, string) (any, error) { return nil, nil }
	}
	srv, err := New(cli, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ctx, ln)
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return srv, ln.Addr().String()
}

func inUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// BenchmarkHeldStreams: the server's memory per held stream, with 10,000
// held at once (each its own connection and key; the holds share one
// lease), and the rate at which they were granted.
func BenchmarkHeldStreams(b *testing.B) {
	const n = 10000
	_, _, addr := benchServer(b)
	before := inUse()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", benchClientEnv, addr, n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HELD ") {
		b.Fatalf("client: %q %v", line, err)
	}
	secs, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, "HELD ")), 64)
	after := inUse()
	b.ReportMetric(float64(after-before)/n, "bytes/stream")
	b.ReportMetric(n/secs, "grants/s")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
}

// BenchmarkGrant: one grant and release of a free lock (each worker its
// own name), by the library, by /v1/hold and its close, and by etcd's
// v3lock service (Lock and Unlock on a lease of the worker's), with 1 and
// 16 workers.
func BenchmarkGrant(b *testing.B) {
	c, _, addr := benchServer(b)
	cli := c.TestClient(b)
	for _, workers := range []int{1, 16} {
		for _, k := range []struct {
			name string
			make func(b *testing.B, i int) func() error
		}{
			{"library", func(b *testing.B, i int) func() error { return libraryGrant(b, cli, i) }},
			{"serve", func(b *testing.B, i int) func() error { return serveGrant(addr, i) }},
			{"serve-kept", func(b *testing.B, i int) func() error { return keptGrant(addr, i) }},
			{"v3lock", func(b *testing.B, i int) func() error { return v3lockGrant(b, cli, i) }},
		} {
			b.Run(fmt.Sprintf("%s/workers=%d", k.name, workers), func(b *testing.B) {
				fns := make([]func() error, workers)
				for i := range fns {
					fns[i] = k.make(b, i)
				}
				drive(b, fns)
			})
		}
	}
}

// drive runs b.N grants over the workers and reports grants/s.
func drive(b *testing.B, fns []func() error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for _, f := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := f(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "grants/s")
}

func libraryGrant(b *testing.B, cli *clientv3.Client, i int) func() error {
	s, err := etcdlock.NewSession(context.Background(), cli)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	m := etcdlock.NewMutex(s, fmt.Sprintf("bench/lib/%d", i))
	return func() error {
		l, err := m.Lock(context.Background())
		if err != nil {
			return err
		}
		return l.Unlock(context.Background())
	}
}

func serveGrant(addr string, i int) func() error {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	body := fmt.Sprintf(`{"name":"bench/serve/%d"}`, i)
	return func() error {
		resp, err := c.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.Contains(line, "granted") {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("hold: %q %v %s", line, err, b)
		}
		return nil
	}
}

func v3lockGrant(b *testing.B, cli *clientv3.Client, i int) func() error {
	lease, err := cli.Grant(context.Background(), 10)
	if err != nil {
		b.Fatal(err)
	}
	ka, err := cli.KeepAlive(context.Background(), lease.ID)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	b.Cleanup(func() { _, _ = cli.Revoke(context.Background(), lease.ID) })
	lc := v3lockpb.NewLockClient(cli.ActiveConnection())
	name := []byte(fmt.Sprintf("bench/v3lock/%d", i))
	return func() error {
		resp, err := lc.Lock(context.Background(), &v3lockpb.LockRequest{Name: name, Lease: int64(lease.ID)})
		if err != nil {
			return err
		}
		_, err = lc.Unlock(context.Background(), &v3lockpb.UnlockRequest{Key: resp.Key})
		return err
	}
}

// keptGrant holds on a kept connection and releases with DELETE, reading
// the stream to its end so that the connection carries the next hold.
func keptGrant(addr string, i int) func() error {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	body := fmt.Sprintf(`{"name":"bench/kept/%d"}`, i)
	return func() error {
		resp, err := c.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
		var first struct{ Event, Hold string }
		if err != nil || json.Unmarshal(line, &first) != nil || first.Event != "granted" {
			return fmt.Errorf("hold: %q %v", line, err)
		}
		req, _ := http.NewRequest("DELETE", "http://"+addr+"/v1/holds/"+first.Hold, nil)
		dresp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, dresp.Body)
		dresp.Body.Close()
		if dresp.StatusCode != http.StatusOK {
			return fmt.Errorf("release: %d", dresp.StatusCode)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
}
