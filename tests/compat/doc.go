// Package compat checks the library against an etcd server binary of
// another version (etcd 3.4 from Debian in CI) with the lowest etcd client
// the library's go.mod requires. It is a module of its own because the
// tests module's embedded etcd server (v3.7) raises the client to its own
// version: run it with GOWORK=off to build with the minimum versions.
//
// Its tests need an etcd binary: $ETCDLOCK_ETCD, else etcd on $PATH. Without
// one they skip with the reason, unless ETCDLOCK_REQUIRE_ETCD=1 (CI) makes
// that a failure.
package compat
