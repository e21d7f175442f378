package shards_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// BenchmarkGrant compares a grant and release of a free lock on a plain
// session with one on a sharded session over a deployment of one cluster:
// the cost of the slot's stamp compare and of the routing. The plain
// session runs on a cluster of its own, started the same way: a plain
// session acquires nothing on a member of a sharded deployment. One
// worker, one name, 3 members a cluster in this process, fsync off.
func BenchmarkGrant(b *testing.B) {
	ctx := context.Background()
	c := embedtest.Start(b, embedtest.WithFsync(false))
	cli := c.TestClient(b)
	plain := embedtest.Start(b, embedtest.WithFsync(false)).TestClient(b)
	if err := shard.Create(ctx, cli, map[string][]string{"c0": c.Endpoints()}); err != nil {
		b.Fatal(err)
	}
	r, err := shard.New(ctx, cli)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	open := map[string]func() (*etcdlock.Mutex, io.Closer, error){
		"plain": func() (*etcdlock.Mutex, io.Closer, error) {
			s, err := etcdlock.NewSession(ctx, plain)
			if err != nil {
				return nil, nil, err
			}
			return etcdlock.NewMutex(s, "bench/plain"), s, nil
		},
		"sharded": func() (*etcdlock.Mutex, io.Closer, error) {
			s, err := shard.NewSession(ctx, r)
			if err != nil {
				return nil, nil, err
			}
			return s.NewMutex("bench/sharded"), s, nil
		},
	}
	for _, kind := range benchOrder {
		b.Run(kind, func(b *testing.B) {
			m, s, err := open[kind]()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchGrants(b, ctx, m)
		})
	}
}

func benchGrants(b *testing.B, ctx context.Context, m *etcdlock.Mutex) {
	for range 20 { // warm: the cluster session, the stamp, connections
		l, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		_ = l.Unlock(ctx)
	}
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		l, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "grants/s")
}

// benchOrder is the order BenchmarkGrant runs its two kinds in
// (BENCHMARKS.md reports both orders, from when both ran on one cluster).
var benchOrder = []string{"plain", "sharded"}
