package serve

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/servetest"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestServeElection: a campaign stream is elected, /v1/leader and
// /v1/observe show it, a second candidate waits and leads once the first
// stream closes.
func TestServeElection(t *testing.T) {
	srv := startServer(t, nil, Config{})
	name := embedtest.UniqueName(t, "serve")
	first, code, line := srv.Open(t, "/v1/campaign", map[string]any{"name": name, "value": "10.0.0.1:80"})
	if code != http.StatusOK || line["event"] != "elected" {
		t.Fatalf("campaign: %d %v", code, line)
	}
	code, out := srv.Do(t, "GET", "/v1/leader?name="+name, nil)
	leader, _ := out["leader"].(map[string]any)
	if code != http.StatusOK || leader["value"] != "10.0.0.1:80" || leader["token"] != line["token"] {
		t.Fatalf("leader: %d %v", code, out)
	}
	events := srv.observe(t, name)
	if ev := <-events; !strings.Contains(ev, `"10.0.0.1:80"`) {
		t.Fatalf("first observed leader: %q", ev)
	}
	secondCh := make(chan map[string]any, 1)
	go func() {
		_, _, l := srv.Open(t, "/v1/campaign", map[string]any{"name": name, "value": "10.0.0.2:80"})
		secondCh <- l
	}()
	locktest.WaitState(t, srv.cli, name, "the second candidate", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	first.Close()
	if l := <-secondCh; l["event"] != "elected" || servetest.TokenOf(t, l) <= servetest.TokenOf(t, line) {
		t.Fatalf("second candidate: %v", l)
	}
	deadline := time.After(long)
	for {
		select {
		case ev := <-events:
			if strings.Contains(ev, `"10.0.0.2:80"`) {
				return
			}
		case <-deadline:
			t.Fatal("observe never showed the second leader")
		}
	}
}
