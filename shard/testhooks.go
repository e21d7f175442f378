package shard

import "github.com/etcdlock/etcdlock/internal/testhook"

// testHandle lets the tests in the tests module hand a *Session to the
// core's test hooks (package testhook): Session embeds it under this
// unexported name, so it adds nothing to the public API, and it reaches
// the knobs of the core's session inside.
type testHandle = testhook.Handle
