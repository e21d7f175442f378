//go:build !unix

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
)

// listenSocket binds the unix socket at path for --socket. Where there is
// no umask to create it 0600 and no reliable way to tell a stale socket,
// it refuses any path that exists.
func listenSocket(path string) (net.Listener, error) {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s exists: refusing to replace it (remove it if it is a stale socket)", path)
	}
	return net.Listen("unix", path)
}
