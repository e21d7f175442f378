package compat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// server is the etcd process the package's tests share.
var server struct {
	once     sync.Once
	endpoint string
	version  string
	err      error // why there is none
	cmd      *exec.Cmd
	dir      string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.cmd != nil {
		_ = server.cmd.Process.Kill()
		_ = server.cmd.Wait()
		os.RemoveAll(server.dir)
	}
	os.Exit(code)
}

// newClient returns a client of the shared etcd process, closed at cleanup.
// It skips t when there is no etcd binary (fails it under
// ETCDLOCK_REQUIRE_ETCD=1) and fails it when the process does not start.
func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	server.once.Do(startServer)
	if errors.Is(server.err, exec.ErrNotFound) {
		if os.Getenv("ETCDLOCK_REQUIRE_ETCD") == "1" {
			t.Fatalf("no etcd binary and ETCDLOCK_REQUIRE_ETCD=1: %v", server.err)
		}
		t.Skipf("no etcd binary (apt-get install etcd-server, or set ETCDLOCK_ETCD): %v", server.err)
	}
	if server.err != nil {
		t.Fatal(server.err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{server.endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// startServer starts one etcd member on free loopback ports and waits for
// it to answer.
func startServer() {
	bin := os.Getenv("ETCDLOCK_ETCD")
	if bin == "" {
		bin = "etcd"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		server.err = err
		return
	}
	ports, err := freePorts(2)
	if err != nil {
		server.err = err
		return
	}
	dir, err := os.MkdirTemp("", "etcdlock-compat-")
	if err != nil {
		server.err = err
		return
	}
	client, peer := "http://"+ports[0], "http://"+ports[1]
	cmd := exec.Command(path, "--name", "compat", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "compat="+peer, "--logger", "zap", "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		server.err = fmt.Errorf("start %s: %w", path, err)
		os.RemoveAll(dir)
		return
	}
	server.cmd, server.dir, server.endpoint = cmd, dir, client
	server.version, server.err = awaitServer(client)
}

// awaitServer waits up to 30 s for the member at endpoint to answer and
// returns its version.
func awaitServer(endpoint string) (string, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, endpoint)
		cancel()
		if err == nil && st.Leader != 0 {
			return st.Version, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("etcd at %s did not answer in 30s: %v", endpoint, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a process that has no event to await
	}
}

// freePorts returns n loopback addresses whose ports were free a moment ago.
func freePorts(n int) ([]string, error) {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, ln.Addr().String())
		defer ln.Close()
	}
	return addrs, nil
}

// uniqueName and testCtx are embedtest.UniqueName and embedtest.Context,
// which this module cannot import: embedtest requires etcd's v3.7 client and
// go 1.26.8, and this module builds with the library's minimum versions
// (GOWORK=off), the point of its tests.

// uniqueName returns a lock name of t.
func uniqueName(t *testing.T) string {
	return "compat/" + strings.ReplaceAll(t.Name(), "/", ".")
}

// testCtx returns a context that ends after d or with the test.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
