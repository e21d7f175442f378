package embedtest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// StartClusters starts n independent clusters for the test t, each with its
// own members, ports and directory, and registers their Close with
// t.Cleanup, as Start does for one. It is how a test gets the clusters of a
// sharded deployment (shard.Create, in package github.com/etcdlock/etcdlock/shard). It calls t.Fatal when one
// cannot start.
func StartClusters(t testing.TB, n int, opts ...Option) []*Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs, err := NewClusters(ctx, n, opts...)
	if err != nil {
		t.Fatalf("embedtest.StartClusters: %v", err)
	}
	for _, c := range cs {
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("embedtest: close cluster: %v", err)
			}
		})
	}
	return cs
}

// NewClusters starts n independent clusters concurrently and returns them
// once each has a leader; the caller Closes them. With WithDir(dir),
// cluster i keeps its data under dir/cluster-<i>. On an error (bad
// options wrap ErrInvalidOption; n < 1 too) none is left running.
func NewClusters(ctx context.Context, n int, opts ...Option) ([]*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: NewClusters: %d clusters", ErrInvalidOption, n)
	}
	cfg, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	cs := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cs {
		own := opts
		if cfg.dir != "" {
			own = append(append([]Option(nil), opts...), WithDir(filepath.Join(cfg.dir, fmt.Sprintf("cluster-%d", i))))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[i], errs[i] = New(ctx, own...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range cs {
			if c != nil {
				_ = c.Close()
			}
		}
		return nil, err
	}
	return cs, nil
}
