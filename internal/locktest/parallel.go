package locktest

import (
	"flag"
	"strconv"
)

// ParallelUnlessSet makes a test binary run up to n parallel tests at
// once, unless its command line set -parallel; call it from TestMain after
// flag.Parse. It is for packages whose parallel tests each start clusters
// of their own and mostly wait on them (for a TTL, a held-back write, an
// election), so that the default (GOMAXPROCS: two on a two-core machine)
// leaves the cores idle.
func ParallelUnlessSet(n int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
