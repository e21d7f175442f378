//go:build unix

package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestRunWaitsForEtcd: within --wait, run waits for etcd to have a leader
// and to come back, saying on stderr what it waits for, then runs its
// command; without --wait it fails at once.
func TestRunWaitsForEtcd(t *testing.T) {
	t.Parallel() // touches only its own names, links and clusters; mostly waits
	c := embedtest.Start(t, embedtest.WithMembers(3))
	eps := strings.Join(c.Endpoints(), ",")
	ms := c.Members()
	restartAll := func() {
		var wg sync.WaitGroup
		for _, m := range ms {
			if !m.Running() {
				wg.Add(1)
				go func() { defer wg.Done(); _ = m.Restart() }()
			}
		}
		wg.Wait()
	}
	t.Cleanup(restartAll)
	args := func(name string, more ...string) []string {
		return append([]string{"--endpoints", eps, "--dial-timeout", "1s", "--command-timeout", "5s", "run", name}, more...)
	}
	// Two of three down: the third answers, without a leader.
	for _, m := range ms[1:] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	p := startRaw(t, nil, args(embedtest.UniqueName(t, "cli"), "--", "true")...)
	if code, _ := p.wait(); code != exitUsage || !strings.Contains(p.stderr.String(), "no leader (quorum lost?)") {
		t.Fatalf("run without --wait, no quorum: exit %d, stderr %q; want 1 and why", code, p.stderr.String())
	}
	p = startRaw(t, nil, args(embedtest.UniqueName(t, "cli"), "--wait", "2m", "--", "echo", "ran")...)
	p.waitStderr("etcd answered but has no leader (quorum lost?); waiting for it")
	// Every member down, then all back.
	if err := ms[0].Kill(); err != nil {
		t.Fatal(err)
	}
	p.waitStderr("etcd does not answer; waiting for it")
	restartAll()
	if code, out := p.wait(); code != 0 || out != "ran" {
		t.Fatalf("run --wait after etcd came back: exit %d, stdout %q, stderr %s", code, out, p.stderr.String())
	}
	if n := strings.Count(p.stderr.String(), "waiting for it"); n != 2 {
		t.Errorf("stderr says what it waits for %d times, want once for each reason: %s", n, p.stderr.String())
	}
}

// TestRunWaitRunsOut: a --wait that runs out while etcd is down ends run
// with 124, as in the queue, saying what it waited for.
func TestRunWaitRunsOut(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1))
	m := c.Members()[0]
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Restart() })
	code, _, stderr := runIn(t, "--endpoints", strings.Join(c.Endpoints(), ","), "--dial-timeout", "1s",
		"run", embedtest.UniqueName(t, "cli"), "--wait", "3s", "--", "true")
	if code != exitWaitTimeout || !strings.Contains(stderr, "timed out after 3s (--wait) waiting for etcd") {
		t.Fatalf("exit %d, stderr %q; want %d and why", code, stderr, exitWaitTimeout)
	}
}

// TestRunWaitRefusesWrongAddress: --wait does not wait for an address that
// cannot be etcd: a host name that does not resolve, or an HTTP/1 server.
func TestRunWaitRefusesWrongAddress(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	for _, tc := range []struct{ name, ep, want string }{
		{"unknown host", "no-such-host.invalid:2379", "no such host"},
		{"HTTP/1", strings.TrimPrefix(web.URL, "http://"), "does not speak HTTP/2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startRaw(t, nil, "--endpoints", tc.ep, "--dial-timeout", "5s", "run", embedtest.UniqueName(t, "cli"), "--wait", "1m", "--", "true")
			code, _ := p.wait()
			if code != exitUsage || time.Since(p.start) > 15*time.Second {
				t.Fatalf("exit %d after %v; want 1 at once", code, time.Since(p.start))
			}
			oneErrorLine(t, p.stderr.String(), tc.want)
		})
	}
}

// runIn runs etcdlock with args (no shared-cluster flags) and returns its
// exit code, stdout and stderr.
func runIn(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	p := startRaw(t, nil, args...)
	code, out := p.wait()
	return code, out, p.stderr.String()
}

// waitStderr waits until p's stderr contains substr.
func (p *proc) waitStderr(substr string) {
	p.t.Helper()
	deadline := time.Now().Add(long)
	for !strings.Contains(p.stderr.String(), substr) {
		select {
		case <-p.done:
			p.t.Fatalf("etcdlock exited before saying %q; stderr: %s", substr, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %q on stderr: %s", substr, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
