//go:build unix

package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestRunSemaphoreAndReaders: with --semaphore 2 two runs hold at once and a
// third waits; with --read two readers share while --write waits for both.
func TestRunSemaphoreAndReaders(t *testing.T) {
	cli := cluster.TestClient(t)
	for _, tc := range []struct {
		name         string
		first, third []string // flags of the two sharers and of the one that must wait
		kind         string
	}{
		{"semaphore", []string{"--semaphore", "2"}, []string{"--semaphore", "2"}, "semaphore"},
		{"readers", []string{"--read"}, []string{"--write"}, "rwmutex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := embedtest.UniqueName(t, "cli")
			gate := filepath.Join(t.TempDir(), "gate")
			script := `echo "started $1"; while [ ! -e "$GATE" ]; do sleep 0.02; done`
			env := []string{"GATE=" + gate}
			var procs []*proc
			for _, id := range []string{"A", "B"} {
				args := append([]string{"run", name, "--identity", id}, tc.first...)
				p := startEnv(t, env, append(append(args, "--"), sh(script, id)...)...)
				p.waitLine("started " + id)
				procs = append(procs, p)
			}
			st := locktest.Describe(t, cli, name)
			if len(st.Holders) != 2 || st.Holders[0].Kind != tc.kind {
				t.Fatalf("holders %+v", st.Holders)
			}
			args := append([]string{"run", name, "--identity", "C"}, tc.third...)
			c := startEnv(t, env, append(append(args, "--"), sh(script, "C")...)...)
			locktest.WaitState(t, cli, name, "C waiting", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, p := range append(procs, c) {
				if code, _ := p.wait(); code != 0 {
					t.Fatalf("exit %d; stderr: %s", code, p.stderr.String())
				}
			}
		})
	}
	code, _, stderr := run(t, append([]string{"run", "x", "--semaphore", "2", "--read", "--"}, sh("true")...)...)
	if code != exitUsage {
		t.Fatalf("--semaphore with --read: exit %d", code)
	}
	oneErrorLine(t, stderr, "exclude each other")
	code, _, stderr = run(t, append([]string{"run", "x", "--semaphore", "0", "--"}, sh("true")...)...)
	if code != exitUsage {
		t.Fatalf("--semaphore 0: exit %d", code)
	}
	oneErrorLine(t, stderr, "at least 1")
}

// TestRunMetricsAddr: run serves the library's metrics and the session's
// health while the command runs.
func TestRunMetricsAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	name := embedtest.UniqueName(t, "cli")
	gate := filepath.Join(t.TempDir(), "gate")
	p := startEnv(t, []string{"GATE=" + gate}, append([]string{"run", name, "--metrics-addr", addr, "--"},
		sh(`echo started; while [ ! -e "$GATE" ]; do sleep 0.02; done`)...)...)
	p.waitLine("started")
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics")
	want := `etcdlock_held{kind="mutex",name="` + name + `"} 1`
	if code != http.StatusOK || !strings.Contains(body, want) {
		t.Fatalf("/metrics: %d, want a line %q in:\n%s", code, want, body)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.wait(); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, p.stderr.String())
	}
	// The server is gone with etcdlock.
	client := http.Client{Timeout: time.Second}
	if _, err := client.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("the metrics server outlived etcdlock")
	}
	code, _, stderr := run(t, append([]string{"run", name, "--metrics-addr", "bad::addr", "--"}, sh("true")...)...)
	if code != exitUsage {
		t.Fatalf("bad --metrics-addr: exit %d", code)
	}
	oneErrorLine(t, stderr, "--metrics-addr")
}
