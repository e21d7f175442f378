//go:build unix

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// socketProbeTimeout bounds the dial that tells a live socket at --socket's
// path from a stale one.
const socketProbeTimeout = time.Second

// listenSocket binds the unix socket at path for --socket, created with
// mode 0600 from the start (the umask is tightened around the bind, so no
// other user can connect in between). It refuses, with an error:
//   - a path that exists and is not a socket (serve never deletes a file);
//   - a socket another process answers on (a serve already running there);
//   - a socket whose dial fails otherwise than refused (it cannot tell).
//
// A socket whose dial is refused is a stale one of an earlier run: it is
// removed first. Serves starting on one path take turns (a lock on
// PATH.lock, left beside the socket), so that one never removes the socket
// another has just bound.
func listenSocket(path string) (net.Listener, error) {
	unlock, err := lockSocketPath(path)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	return ln, err
}

// removeStaleSocket removes the socket at path if nothing answers on it;
// nil when nothing is there. See listenSocket for what it refuses.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("%s exists and is not a socket (%s): refusing to replace it", path, fi.Mode().Type())
	}
	conn, err := net.DialTimeout("unix", path, socketProbeTimeout)
	switch {
	case err == nil:
		conn.Close()
		return fmt.Errorf("another process serves on %s", path)
	case !errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot tell whether %s is in use: %w", path, err)
	}
	return os.Remove(path)
}

// lockSocketPath takes the exclusive lock of path (flock on path+".lock",
// created 0600 if need be) and returns its release.
func lockSocketPath(path string) (func(), error) {
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s.lock: %w", path, err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}
