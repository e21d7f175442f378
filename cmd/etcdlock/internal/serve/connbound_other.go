//go:build !linux

package serve

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not known: the
// keepalive probes and the write deadlines still bound a hold, less
// tightly.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
