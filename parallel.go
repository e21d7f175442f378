package etcdlock

import "sync"

// parallel calls f(0) … f(n-1), each in a goroutine of its own, and
// returns when every call has: for the closes and deletes of a set (a
// LockAll's waiters, a Locks' grants, a routed session's cluster
// sessions), each of which may wait up to wire.AttemptTimeout for a
// cluster that does not answer, so that the set takes as long as its
// slowest member rather than their sum.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}
