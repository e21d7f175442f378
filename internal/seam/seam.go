// Package seam carries the one thing package shard needs of the core that
// users must not reach: the constructor of a routed session. A routed
// *etcdlock.Session has no lease of its own (Lease 0) and is never lost
// as a whole, a contract only shard.Session documents; exported from
// package etcdlock, it would be handed to anyone who writes a Router.
// Package etcdlock sets NewRoutedSession when it is initialised (route.go);
// nothing else may set it. Being internal, it is no part of the public API.
package seam

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Router is a slot map a routed session follows to put each name on the
// cluster that owns its slot. Package shard implements it over its map.
type Router interface {
	// Owner returns the id of the cluster that owns slot now (during a
	// move, the source, which holds the slot's names until the map
	// switches), and a channel closed when the map or the moves change.
	Owner(slot int) (cluster string, changed <-chan struct{}, err error)
	// Client returns the client of cluster id.
	Client(ctx context.Context, id string) (*clientv3.Client, error)
	// Moving reports whether a move of slot is recorded.
	Moving(slot int) bool
}

// NewRoutedSession returns a routed *etcdlock.Session (as any) over r, its
// cluster sessions opened with opts (etcdlock.SessionOption values); see
// newRoutedSession in package etcdlock.
var NewRoutedSession func(ctx context.Context, root *clientv3.Client, r Router, opts ...any) (any, error)
