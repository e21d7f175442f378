// Package etcdlock provides fair distributed locks, leader election and
// fencing tokens over an existing etcd cluster.
//
// A Session is one etcd lease kept alive by the library; a Mutex on a name
// grants one holder at a time, in first-come order, each waiter watching only
// the waiter ahead of it. Every grant carries a Token, the create revision of
// its key, that strictly increases from one grant of a name to the next.
//
// # Safety
//
// etcd decides who holds a lock: at most one holder at a time as seen by the
// cluster. A holder can still be paused (a GC pause, swap, SIGSTOP, a suspended
// VM) past its lease and wake believing it holds the lock. A lock that
// protects data is therefore only as good as the token check at the resource:
// pass Lock.Token with every write and have the resource reject a token below
// the highest it has seen (Fence), or make etcd writes conditional on
// Lock.Guard.
//
// # More than one cluster
//
// Package github.com/etcdlock/etcdlock/shard spreads names over several etcd
// clusters: its shard.Session makes this package's recipes on the cluster
// that owns each name's slot. This package never imports it.
//
// # Keys
//
// Every key lives under "etcdlock/<escaped name>%/<kind tag>/<lease hex>-<waiter id hex>",
// with the JSON value {"v":1,"identity":"...","value":"..."}. Escaping
// percent-encodes '%', bytes 0x00-0x1f and 0x7f, and nothing else, so names
// that are prefixes of each other ("jobs/a", "jobs/a/b") never interfere and
// every name starting with "team-a/" lives under the key prefix
// "etcdlock/team-a/". A client wrapped with clientv3/namespace moves all of it
// under its prefix.
package etcdlock
