package etcdlock

import "testing"

// The benchmarks of the pure parts; those of Lock, TryLock, Describe and
// sessions need a cluster and are in tests/etcdlock.

func BenchmarkFenceAdmit(b *testing.B) {
	var f Fence
	b.ReportAllocs()
	t := Token(1)
	for range b.N {
		if err := f.Admit(t); err != nil {
			b.Fatal(err)
		}
		t++
	}
}

func BenchmarkEscapeName(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		_ = namePrefix("team-a/billing/nightly-100%")
	}
}
