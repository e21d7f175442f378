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

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestUI: etcdlock ui serves the page and its API for the prefix on the
// address it prints, read-only by default, and exits 0 on SIGINT.
func TestUI(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
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

// TestUITimelineTellsHowGrantsEnded: the page's timeline says what happened
// to each grant, told by real processes: a run whose command exits 0 is
// "released" (before, its session's revoke raced the page's lease lookup
// and it showed "expired"), a run SIGKILLed while holding is "expired" once
// its lease runs out, and a break --force is "broken" (the page did not
// break it).
func TestUITimelineTellsHowGrantsEnded(t *testing.T) {
	cli := cluster.TestClient(t)
	base := embedtest.UniqueName(t, "cli")
	ui := start(t, "ui", "--listen", "127.0.0.1:0", "--prefix", base)
	url := waitStderr(t, ui, regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/`))
	t.Cleanup(func() { ui.signal(syscall.SIGINT); ui.wait() })
	waitTimeline(t, url, "the page's first read", func([]timelineEvent) bool { return true })

	// A job that finishes.
	if code, _, stderr := run(t, "run", base+"/done", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	// A holder killed with SIGKILL: its lease runs out.
	killed := start(t, "run", "--ttl", "2", base+"/killed", "--", "sleep", "60")
	st := locktest.WaitState(t, cli, base+"/killed", "the run holding", func(st *etcdlock.LockState) bool { return st.Holder != nil })
	killedToken := int64(st.Holder.Token)
	killed.signal(syscall.SIGKILL)
	killed.wait()
	// A holder broken by an operator.
	_, l := hold(t, cli, base+"/broken", "holder")
	if code, _, stderr := run(t, "break", base+"/broken", "--force"); code != 0 {
		t.Fatalf("break: exit %d: %s", code, stderr)
	}

	ends := map[string]string{base + "/done": "released", base + "/broken": "broken", base + "/killed": "expired"}
	tokens := map[string]int64{base + "/broken": int64(l.Token()), base + "/killed": killedToken}
	evs := waitTimeline(t, url, "the three ends", func(evs []timelineEvent) bool {
		n := 0
		for _, e := range evs {
			if ends[e.Name] == e.Kind && (tokens[e.Name] == 0 || tokens[e.Name] == e.Token) {
				n++
			}
		}
		return n == 3
	})
	for _, e := range evs {
		if want, ok := ends[e.Name]; ok && e.Kind != "granted" && e.Kind != want {
			t.Errorf("timeline: %+v, want granted or %s", e, want)
		}
	}
}

// timelineEvent is an event of the page's /api/timeline.
type timelineEvent struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Token int64  `json:"token"`
}

// waitTimeline polls the page's timeline until cond holds.
func waitTimeline(t *testing.T, url, what string, cond func([]timelineEvent) bool) []timelineEvent {
	t.Helper()
	deadline := time.Now().Add(long)
	for {
		var tl struct {
			Events []timelineEvent `json:"events"`
		}
		resp, err := http.Get(url + "api/timeline")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&tl)
			resp.Body.Close()
		}
		if err == nil && cond(tl.Events) {
			return tl.Events
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s on the timeline: %+v (%v)", what, tl.Events, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
