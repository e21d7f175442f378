//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it checks the serve process's --socket file.

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestServeSocketRefuses: --socket never deletes what is not a stale socket
// of its own kind. A regular file at the path, and a socket another serve
// answers on, are refused (usage exit, a clear message) and left as they
// were; a stale socket (nothing answers, the dial is refused) is replaced.
func TestServeSocketRefuses(t *testing.T) {
	t.Run("regular file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "precious")
		if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := run(t, "serve", "--socket", path)
		if code != exitUsage || !strings.Contains(stderr, "is not a socket") {
			t.Fatalf("serve on a regular file: exit %d, %q; want %d and \"is not a socket\"", code, stderr, exitUsage)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
			t.Fatalf("the file after serve: %q, %v; want it intact", b, err)
		}
	})
	t.Run("live socket", func(t *testing.T) {
		first := startServer(t, nil)
		code, _, stderr := run(t, "serve", "--socket", first.sock)
		if code != exitUsage || !strings.Contains(stderr, "another process serves on") {
			t.Fatalf("serve on a live socket: exit %d, %q; want %d and \"another process serves on\"", code, stderr, exitUsage)
		}
		if status, body := first.Do(t, "GET", "/v1/state?name="+embedtest.UniqueName(t, "cli"), nil); status != http.StatusOK {
			t.Fatalf("the first serve after a second tried its socket: %d %v", status, body)
		}
	})
	t.Run("stale socket", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "etcdlock.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close() // the file stays; a dial is refused
		srv := startServerAt(t, sock, nil)
		if status, body := srv.Do(t, "GET", "/v1/state?name="+embedtest.UniqueName(t, "cli"), nil); status != http.StatusOK {
			t.Fatalf("serve on a stale socket: %d %v", status, body)
		}
	})
}

// TestServeSocketMode: the socket is 0600 even under a umask that lets
// everyone in.
func TestServeSocketMode(t *testing.T) {
	old := syscall.Umask(0) // serve inherits it
	srv := startServer(t, nil)
	syscall.Umask(old)
	fi, err := os.Lstat(srv.sock)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("socket mode %v, want 0600", perm)
	}
}
