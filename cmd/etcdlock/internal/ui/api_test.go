package ui

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLocksAPI: the page's JSON shows holders with token and identity,
// waiters in grant order, semaphores and elections, filtered and paged.
// checkThreeNames checks TestLocksAPI's names as the API shows them: alice
// holding the nightly lock (token tok) with bob behind her, carol's
// semaphore of 3 and dave's leadership.
func checkThreeNames(t *testing.T, got locksJSON, tok int64) {
	t.Helper()
	nightly, pool, leader := got.Locks[0], got.Locks[1], got.Locks[2]
	if h := nightly.Holder; h == nil || h.Identity != "alice" || h.Token != tok || h.LeaseTTLLeft == nil || *h.LeaseTTLLeft <= 0 {
		t.Errorf("holder of %s: %+v, want alice with token %d and time left", nightly.Name, h, tok)
	}
	if w := nightly.Waiters[0]; w.Identity != "bob" || w.Token <= tok || w.InQueue == nil {
		t.Errorf("waiter: %+v, want bob behind alice", w)
	}
	if pool.Holder == nil || pool.Holder.Kind != "semaphore" || pool.Holder.Size != 3 {
		t.Errorf("semaphore: %+v", pool.Holder)
	}
	if leader.Holder == nil || leader.Holder.Kind != "election" || leader.Holder.Value != "dave:8080" {
		t.Errorf("election: %+v", leader.Holder)
	}
}

func TestLocksAPI(t *testing.T) {
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	_, hs := startUI(t, cli, Config{Prefix: p})
	held := lock(t, cli, p+"billing/nightly", "alice")
	ctx := embedtest.Context(t, long)
	go func() {
		_, _ = etcdlock.NewMutex(locktest.OpenSession(t, cli, etcdlock.WithIdentity("bob")), p+"billing/nightly").Lock(ctx)
	}()
	if _, err := etcdlock.NewSemaphore(locktest.OpenSession(t, cli, etcdlock.WithIdentity("carol")), p+"pool", 3).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdlock.NewElection(locktest.OpenSession(t, cli, etcdlock.WithIdentity("dave")), p+"reports/leader").Campaign(ctx, "dave:8080"); err != nil {
		t.Fatal(err)
	}
	got := waitLocks(t, hs, "", "three names with bob waiting", func(l locksJSON) bool {
		return l.Names == 3 && len(l.Locks) == 3 && len(l.Locks[0].Waiters) == 1
	})
	checkThreeNames(t, got, int64(held.Token()))
	for _, tc := range []struct {
		query   string
		matched int
		names   []string
	}{
		{"?filter=leader", 1, []string{p + "reports/leader"}},
		{"?filter=nothing-like-it", 0, nil},
		{"?limit=1&offset=1", 3, []string{p + "pool"}},
		{"?offset=7", 3, nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var l locksJSON
			if code := getJSON(t, hs, "/api/locks"+tc.query, &l); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			var names []string
			for _, s := range l.Locks {
				names = append(names, s.Name)
			}
			if l.Matched != tc.matched || strings.Join(names, ",") != strings.Join(tc.names, ",") {
				t.Fatalf("matched %d %v, want %d %v", l.Matched, names, tc.matched, tc.names)
			}
		})
	}
}

// TestAPIBadInput: bad parameters and names get a clear message and
// change nothing.
func TestAPIBadInput(t *testing.T) {
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	_, hs := startUI(t, cli, Config{Prefix: p})
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/api/locks?limit=-1", http.StatusBadRequest, "limit"},
		{"/api/locks?limit=100000", http.StatusBadRequest, "limit"},
		{"/api/locks?offset=x", http.StatusBadRequest, "offset"},
		{"/api/timeline?since=-3", http.StatusBadRequest, "since"},
		{"/api/locks/elsewhere/x", http.StatusNotFound, "outside this page's prefix"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			var body map[string]string
			if code := getJSON(t, hs, tc.path, &body); code != tc.code || !strings.Contains(body["error"], tc.want) {
				t.Fatalf("%d %q, want %d and an error about %q", code, body["error"], tc.code, tc.want)
			}
		})
	}
}

// TestLockAPIEscapedName: a name that needs escaping in etcd's keys and in
// the URL reads back as itself.
func TestLockAPIEscapedName(t *testing.T) {
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	_, hs := startUI(t, cli, Config{Prefix: p})
	name := p + "100% done/a b"
	l := lock(t, cli, name, "erin")
	waitLocks(t, hs, "", "the lock", func(l locksJSON) bool { return l.Names == 1 })
	var st struct {
		Name   string `json:"name"`
		Holder *struct {
			Token int64 `json:"token"`
		} `json:"holder"`
	}
	path := "/api/locks/" + strings.ReplaceAll(strings.ReplaceAll(name, "%", "%25"), " ", "%20")
	if code := getJSON(t, hs, path, &st); code != http.StatusOK || st.Name != name || st.Holder == nil || st.Holder.Token != int64(l.Token()) {
		t.Fatalf("GET %s: %d %+v, want %q held with token %d", path, code, st, name, l.Token())
	}
}

// TestUnknownPrefix: a prefix with nothing under it is an empty, loaded
// page, not an error.
func TestUnknownPrefix(t *testing.T) {
	_, hs := startUI(t, cluster.TestClient(t), Config{Prefix: uniquePrefix(t) + "nobody-here/"})
	got := waitLocks(t, hs, "", "the first read", func(l locksJSON) bool { return l.Loaded })
	if got.Names != 0 || len(got.Locks) != 0 || got.Error != "" {
		t.Fatalf("%+v, want an empty page without error", got)
	}
}

// TestStreamShowsChanges: a Lock, a waiter and a release show on the
// event stream as timeline events, in etcd's order; closing the stream
// ends its subscription.
func TestStreamShowsChanges(t *testing.T) {
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	srv, hs := startUI(t, cli, Config{Prefix: p})
	waitLocks(t, hs, "", "the first read", func(l locksJSON) bool { return l.Loaded })
	st := openStream(t, hs)
	name := p + "job"
	held := lock(t, cli, name, "alice")
	ev := st.waitEvent(t, long, func(e event) bool { return e.Kind == kindGranted && e.Name == name })
	if ev.Token != int64(held.Token()) || ev.Identity != "alice" {
		t.Fatalf("granted event %+v, want alice's token %d", ev, held.Token())
	}
	ctx := embedtest.Context(t, long)
	granted := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewMutex(locktest.OpenSession(t, cli, etcdlock.WithIdentity("bob")), name).Lock(ctx)
		if err == nil {
			granted <- l
		}
	}()
	st.waitEvent(t, long, func(e event) bool { return e.Kind == kindWaiting && e.Identity == "bob" })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	st.waitEvent(t, long, func(e event) bool { return e.Kind == kindReleased && e.Token == int64(held.Token()) })
	st.waitEvent(t, long, func(e event) bool { return e.Kind == kindGranted && e.Identity == "bob" })
	<-granted
	if n := srv.hub.count(); n != 1 {
		t.Fatalf("%d streams open, want 1", n)
	}
	st.cancel()
	deadline := time.Now().Add(long)
	for srv.hub.count() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a closed stream is still subscribed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExpiredOnTimeline: a holder whose lease ends shows as expired.
func TestExpiredOnTimeline(t *testing.T) {
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	_, hs := startUI(t, cli, Config{Prefix: p})
	waitLocks(t, hs, "", "the first read", func(l locksJSON) bool { return l.Loaded })
	st := openStream(t, hs)
	s := locktest.OpenSession(t, cli, etcdlock.WithIdentity("mallory"))
	l, err := etcdlock.NewMutex(s, p+"job").Lock(embedtest.Context(t, long))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(embedtest.Context(t, long), s.Lease()); err != nil {
		t.Fatal(err)
	}
	st.waitEvent(t, long, func(e event) bool { return e.Kind == kindExpired && e.Token == int64(l.Token()) })
}

// TestBreakAPI: read-only pages refuse; with AllowBreak a Break deletes
// exactly the grant shown (its holder's Lock.Context ends with
// ErrLockLost), the timeline says "broken", and a second Break of the same
// grant changes nothing.
// postBreak posts body to the break API at hsURL and returns the status
// and the response's body.
func postBreak(t *testing.T, hsURL string, c *http.Client, body string) (int, string) {
	t.Helper()
	resp, err := c.Post(hsURL+"/api/break", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := new(bytes.Buffer)
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.String()
}

// checkForgedBreaks checks that hs refuses body posted through another
// host name (DNS rebinding) and a form post (a cross-site form).
func checkForgedBreaks(t *testing.T, hs *httptest.Server, body string) {
	t.Helper()
	rebound, err := http.NewRequest(http.MethodPost, hs.URL+"/api/break", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	rebound.Host = "attacker.example:8080" // a name rebound to this address
	rebound.Header.Set("Content-Type", "application/json")
	if resp, err := hs.Client().Do(rebound); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a break through a name: %d, want 403", resp.StatusCode)
	}
	resp, err := hs.Client().Post(hs.URL+"/api/break", "application/x-www-form-urlencoded", strings.NewReader("name=x&token=1"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("a form post: %d, want 415", resp.StatusCode)
	}
}

func TestBreakAPI(t *testing.T) {
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	name := p + "stuck"
	held := lock(t, cli, name, "alice")
	post := func(hsURL string, c *http.Client, body string) (int, string) { return postBreak(t, hsURL, c, body) }
	body := `{"name":"` + name + `","token":` + held.Token().String() + `}`
	_, ro := startUI(t, cli, Config{Prefix: p})
	if code, msg := post(ro.URL, ro.Client(), body); code != http.StatusForbidden || !strings.Contains(msg, "--allow-break") {
		t.Fatalf("read-only break: %d %s", code, msg)
	}
	_, hs := startUI(t, cli, Config{Prefix: p, AllowBreak: true})
	waitLocks(t, hs, "", "the first read", func(l locksJSON) bool { return l.Names == 1 })
	st := openStream(t, hs)
	if code, msg := post(hs.URL, hs.Client(), body); code != http.StatusOK {
		t.Fatalf("break: %d %s", code, msg)
	}
	select {
	case <-held.Context().Done():
		if !errors.Is(context.Cause(held.Context()), etcdlock.ErrLockLost) {
			t.Fatalf("holder's context ended with %v, want ErrLockLost", context.Cause(held.Context()))
		}
	case <-time.After(long):
		t.Fatal("the broken holder's context did not end")
	}
	st.waitEvent(t, long, func(e event) bool { return e.Kind == kindBroken && e.Token == int64(held.Token()) })
	next := lock(t, cli, name, "bob")
	if code, msg := post(hs.URL, hs.Client(), body); code != http.StatusConflict || !strings.Contains(msg, "no longer held") {
		t.Fatalf("second break: %d %s, want 409", code, msg)
	}
	if next.Context().Err() != nil {
		t.Fatal("the second break ended the next holder's grant")
	}
	for _, bad := range []string{`{"name":"","token":1}`, `{"name":"` + name + `","token":0}`, `not json`} {
		if code, msg := post(hs.URL, hs.Client(), bad); code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("break %s: %d %s, want 400", bad, code, msg)
		}
	}
	checkForgedBreaks(t, hs, body)
	if next.Context().Err() != nil {
		t.Fatal("a bad break ended the holder's grant")
	}
}

var _ = clientv3.WithPrefix

// TestPagesShareOneWatch: opening pages and their event streams asks etcd
// for nothing new: every stream is fed from the server's one watch.
func TestPagesShareOneWatch(t *testing.T) {
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	_, hs := startUI(t, cli, Config{Prefix: p})
	waitLocks(t, hs, "", "the first read", func(l locksJSON) bool { return l.Loaded && l.Names == 0 })
	// The server opens its watch after its first read: a lock taken after
	// that read shows on the page only through the watch, so the watch is
	// open before the counting starts.
	lock(t, cli, p+"warm", "carol")
	waitLocks(t, hs, "", "a lock seen through the watch", func(l locksJSON) bool { return l.Names == 1 })
	m := cluster.Members()[0]
	watches, reads := m.Calls("/etcdserverpb.Watch/Watch"), m.Calls("/etcdserverpb.KV/Range")
	var streams []*sse
	for i := 0; i < 3; i++ {
		streams = append(streams, openStream(t, hs))
		var l locksJSON
		if code := getJSON(t, hs, "/api/locks", &l); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	if w, r := m.Calls("/etcdserverpb.Watch/Watch"), m.Calls("/etcdserverpb.KV/Range"); w != watches || r != reads {
		t.Fatalf("three pages cost etcd %d watch requests and %d reads, want none", w-watches, r-reads)
	}
	held := lock(t, cli, p+"job", "alice")
	for i, st := range streams {
		ev := st.waitEvent(t, long, func(e event) bool { return e.Kind == kindGranted && e.Name == p+"job" })
		if ev.Token != int64(held.Token()) {
			t.Fatalf("stream %d: %+v, want token %d", i, ev, held.Token())
		}
	}
}
