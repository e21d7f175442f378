//go:build linux

package safety

import "golang.org/x/sys/unix"

// monoNow reads CLOCK_MONOTONIC in nanoseconds: one clock for the harness
// and every worker process, immune to wall-clock steps.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
