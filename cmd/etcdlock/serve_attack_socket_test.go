//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it races two serve processes for one --socket path.

import (
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// TestAttackServeSocketStaleRace: two serves start at once on the path of
// a stale socket. Each probes it (refused), removes it and binds: when one
// removes the other's fresh socket between that one's remove and bind,
// both listeners succeed, one of them on an unlinked file that nobody can
// reach (a serve that runs, answers no one, and when it stops unlinks the
// other's socket: Go's unix listener unlinks its path on Close).
func TestAttackServeSocketStaleRace(t *testing.T) {
	const rounds = 300
	both := 0
	for range rounds {
		path := filepath.Join(t.TempDir(), "etcdlock.sock")
		stale, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		stale.(*net.UnixListener).SetUnlinkOnClose(false)
		stale.Close()
		var lns [2]net.Listener
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				lns[i], _ = listenSocket(path)
			}()
		}
		close(start)
		wg.Wait()
		if lns[0] != nil && lns[1] != nil {
			both++
			_ = lns[0].Close()
			_ = lns[1].Close()
			continue
		}
		for _, ln := range lns {
			if ln != nil {
				ln.Close()
			}
		}
	}
	if both > 0 {
		t.Fatalf("%d of %d rounds: both serves bound the stale socket's path (one orphaned)", both, rounds)
	}
}
