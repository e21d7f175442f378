//go:build unix

package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUI: etcdlock ui serves the page and its API for the prefix on the
// address it prints, read-only by default, and exits 0 on SIGINT.
func TestUI(t *testing.T) {
	cli := newClient(t)
	name := uniqueName(t)
	_, l := hold(t, cli, name, "ui-holder")
	p := start(t, "ui", "--listen", "127.0.0.1:0", "--prefix", name)
	url := waitStderr(t, p, regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/`))
	if !strings.Contains(p.stderr.String(), "read-only") {
		t.Errorf("stderr %q, want it to say read-only", p.stderr.String())
	}
	deadline := time.Now().Add(long)
	for {
		var page struct {
			Locks []struct {
				Name   string `json:"name"`
				Holder *struct {
					Token    int64  `json:"token"`
					Identity string `json:"identity"`
				} `json:"holder"`
			} `json:"locks"`
		}
		resp, err := http.Get(url + "api/locks")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err == nil && len(page.Locks) == 1 && page.Locks[0].Holder != nil {
			if h := page.Locks[0].Holder; page.Locks[0].Name != name || h.Token != int64(l.Token()) || h.Identity != "ui-holder" {
				t.Fatalf("page shows %+v, want %s held by ui-holder with token %d", page.Locks[0], name, l.Token())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed the lock: %+v %v", page, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post(url+"api/break", "application/json", strings.NewReader(`{"name":"x","token":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a break on a read-only page: %d, want 403", resp.StatusCode)
	}
	p.signal(syscall.SIGINT)
	if code, _ := p.wait(); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0; stderr: %s", code, p.stderr.String())
	}
}

// TestUIBadListen: an address it cannot listen on is a clear error.
func TestUIBadListen(t *testing.T) {
	code, _, stderr := run(t, "ui", "--listen", "256.0.0.1:80")
	if code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	oneErrorLine(t, stderr, "--listen")
}

// waitStderr returns the first match of re in p's stderr.
func waitStderr(t *testing.T, p *proc, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(long)
	for {
		if m := re.FindString(p.stderr.String()); m != "" {
			return m
		}
		select {
		case <-p.done:
			t.Fatalf("etcdlock exited; stderr: %s", p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %v on stderr: %s", re, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
