package supervise

import (
	"os"
	"syscall"
)

// SignalCode returns the exit code for "interrupted by sig": 128+N, or 128
// for a signal that has no number. It is safe for concurrent use.
func SignalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128
}
