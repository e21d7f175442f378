// Package wire is etcdlock's ground floor: what goes over the wire to etcd
// below the sessions. It holds the keeper (one keepalive stream per client,
// pinned to the leader, and the lending of its connection), the group-commit
// batcher, the Txn of a queue write, and the one retry mechanism (Backoff,
// and Classify, which names what a failed request tells about its write).
//
// It imports nothing of etcdlock's: it sees a session only through Kept,
// and the root package maps what it reports to its own sentinels and
// Observer (DESIGN.md, "Packages and which way imports go").
package wire
