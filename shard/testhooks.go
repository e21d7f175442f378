package shard

import "github.com/etcdlock/etcdlock/internal/testhook"

// init lets the tests in the tests module hand a *Session to the core's
// test hooks (see package testhook). Nothing here runs unless a test calls
// it.
func init() {
	testhook.ShardSession = func(s any) (any, bool) {
		if ss, ok := s.(*Session); ok {
			return ss.s, true
		}
		return nil, false
	}
}
