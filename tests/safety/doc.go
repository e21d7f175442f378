// Package safety is etcdlock's Jepsen-style safety suite: it checks, under
// injected faults, the library's promise that a lock has at most one holder
// as etcd sees it and that a resource which checks fencing tokens never
// accepts an older holder's write.
//
// The package's tests run four workloads, each twice (the workers' writes
// sent through their client's group commit, the default, and then with
// WithoutBatching), against an in-process 5-member etcd cluster (package
// embedtest) with worker processes that really are processes (the test
// binary re-executed), so that they can be SIGSTOPped past their lease and
// SIGKILLed:
//
//   - a fenced register: workers lock, read a counter from a small HTTP
//     service (Register) with their token, write read+1 with the token, and
//     unlock;
//   - guarded etcd state: the same loop, with the counter in etcd and every
//     read and write a Txn guarded by Lock.Guard;
//   - an election: leaders chosen by Election.Run write heartbeats (the same
//     increments) to a fenced Register;
//   - read-write: RWMutex writers increment a fenced Register (Fence.Admit)
//     and readers read it with SharedHeader (Fence.AdmitShared).
//
// Meanwhile a schedule of faults runs: pauses of workers (also exactly
// between a read and its write, until the lease has expired and the next
// holder has read) and SIGKILLs, of every worker but the steady ones, whose
// sessions live on through the other faults, member crashes, leader crashes, isolated
// members, two of five members down, compactions, and holds of the link
// through which the workers reach one member, often the leader (not in the
// guarded-etcd cell) (embedtest's Link.Hold: what they send meanwhile is
// delivered after they gave up on it). In the fenced-register cells half of
// the holds are late-write holds: the leader's link and one or two others
// held for 40-60 s, with no member fault meanwhile, while a steady worker
// cancels Locks whose enqueue is in the held path, so the library must give
// up key names of unknown outcome and go on locking the same names while
// everything held waits to be delivered.
// (Late-write holds run only in cells of a minute or more, not in CI's
// short cells.) Everything is healed before the end.
//
// What the clients saw is collected in a History and judged by Check:
// linearizability of the increments (github.com/anishathalye/porcupine),
// no acknowledged increment lost or applied twice, tokens admitted by the
// resource only ever increasing, grants that agree with etcd's own record of
// the queue (a watch opened before the first operation), FIFO order, no
// grant whose key was deleted before its holder released it while its
// session lived on (two holders, which fencing hides from the other
// checkers), and no write admitted after a shared read with a newer token.
// A self-test runs the same suite against deliberately broken registers
// (Unfenced, FenceWritesOnly) and asserts that the checkers fail them.
//
// TestSafetySharded runs a sharded cell: in-process workers share sharded
// sessions over two 3-member clusters and lock two names whose slots a mover
// nemesis moves back and forth (some moves with ForceAfter; a Resume beside
// a running call; a mover stalled at a phase and woken after other moves;
// AbortMove; RaiseGeneration, refused during a move from its cluster),
// while the member lanes, holds and cuts of the workers' links and
// revocations of their leases run. The register's checkers judge each
// name's history; the queue's judge each cluster's record of it, one epoch
// (from a stamp going active to its next freeze) at a time. 20 s of faults
// in CI; ETCDLOCK_SAFETY_SHARDED_LONG=1 for 3 minutes, or
// ETCDLOCK_SAFETY_SHARDED_DURATION.
//
// The suite runs in CI in a few minutes (12 s per cell, 10 s per
// self-test). Set ETCDLOCK_SAFETY_DURATION (for example 60s) for longer
// runs, with go test -timeout 0; docs/safety.md has the
// details.
package safety
