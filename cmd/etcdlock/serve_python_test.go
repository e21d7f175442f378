//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it runs the documented Python client against the serve process.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestServePythonExample runs examples/python/fenced_write.py against a
// real server and cluster: two holders in turn, tokens that grow, a stale
// token refused by the fenced store.
func TestServePythonExample(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("ETCDLOCK_REQUIRE_PYTHON") != "" {
			t.Fatal("python3 is not installed, and ETCDLOCK_REQUIRE_PYTHON is set")
		}
		t.Skip("python3 is not installed, so the Python example cannot run here (CI installs it)")
	}
	srv := startServer(t, nil, "--listen", "127.0.0.1:0")
	cmd := exec.Command(py, "fenced_write.py", srv.addr, embedtest.UniqueName(t, "cli"))
	cmd.Dir = filepath.Join("..", "..", "examples", "python")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused: stale token") || !strings.Contains(string(out), " ok") {
		t.Fatalf("python example: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
