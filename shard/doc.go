// Package shard spreads lock names over several etcd clusters, above
// package etcdlock: a root cluster holds the slot map (which cluster owns
// each of NumSlots slots) and a record per member cluster; a name lives in
// the slot of its shard key (KeyOf, SlotOf).
//
//   - Create makes a deployment, once; New opens it (Shards: the map,
//     followed by a watch), and its methods operate it (AddCluster,
//     SetEndpoints, RemoveCluster, RaiseGeneration, MoveSlot, AbortMove)
//     and read it (Describe, List, Where, ClusterStates...).
//   - NewSession opens a Session, whose methods make the library's own
//     recipes (etcdlock.Mutex, RWMutex, Semaphore, Election, LockAll) on
//     the cluster that owns each name's slot. Its contract differs from an
//     etcdlock.Session's: a lease per cluster, lost per cluster; see
//     Session.
//
// Package shard imports etcdlock, never the reverse: the core knows
// sharding only through internal/seam's Router (which a Session gives it) and the
// stamp compare inside its enqueue Txn (DESIGN.md, "Packages and which way
// imports go"). docs/sharding.md is the guide.
package shard
