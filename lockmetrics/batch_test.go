package lockmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBatched: each write observes its batch's size, and the batches count
// once per batch (each write adds 1/size).
func TestBatched(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		m.Batched(4) // one batch of four writes
	}
	m.Batched(1) // one write alone
	m.Batched(0) // not sent: not counted
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP etcdlock_batches_total etcd commits of this process's writes (each write counts 1/its batch's size).
# TYPE etcdlock_batches_total counter
etcdlock_batches_total 2
`), "etcdlock_batches_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.batchSize); n != 1 {
		t.Fatalf("batch_size series: %d", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP etcdlock_batch_size Writes per etcd commit (group commit), observed once per write.
# TYPE etcdlock_batch_size histogram
etcdlock_batch_size_bucket{le="1"} 1
etcdlock_batch_size_bucket{le="2"} 1
etcdlock_batch_size_bucket{le="4"} 5
etcdlock_batch_size_bucket{le="8"} 5
etcdlock_batch_size_bucket{le="16"} 5
etcdlock_batch_size_bucket{le="32"} 5
etcdlock_batch_size_bucket{le="64"} 5
etcdlock_batch_size_bucket{le="128"} 5
etcdlock_batch_size_bucket{le="+Inf"} 5
etcdlock_batch_size_sum 17
etcdlock_batch_size_count 5
`), "etcdlock_batch_size"); err != nil {
		t.Fatal(err)
	}
}
