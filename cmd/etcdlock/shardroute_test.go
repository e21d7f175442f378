//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/servetest"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// deployment is a sharded deployment of two one-member clusters, "a" (also
// the root) and "b", made with etcdlock clusters init, with a library
// Shards of it.
type deployment struct {
	cs   []*embedtest.Cluster
	clis map[string]*clientv3.Client // a direct client of each cluster
	r    *shard.Shards
}

// startDeployment starts d, closed at cleanup.
func startDeployment(t *testing.T) *deployment {
	t.Helper()
	d := &deployment{cs: embedtest.StartClusters(t, 2, embedtest.WithMembers(1))}
	d.clis = map[string]*clientv3.Client{"a": d.cs[0].TestClient(t), "b": d.cs[1].TestClient(t)}
	if code, out, stderr := d.sh(t, "clusters", "init", "a="+strings.Join(d.cs[0].Endpoints(), ","),
		"b="+strings.Join(d.cs[1].Endpoints(), ",")); code != 0 {
		t.Fatalf("clusters init: exit %d, %q, %q", code, out, stderr)
	}
	r, err := shard.New(embedtest.Context(t, long), d.clis["a"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	d.r = r
	return d
}

// at returns the flags that point etcdlock at cluster i.
func (d *deployment) at(i int) []string {
	return []string{"--endpoints", strings.Join(d.cs[i].Endpoints(), ","), "--dial-timeout", "20s", "--command-timeout", "20s"}
}

// sh runs etcdlock at the root to its end.
func (d *deployment) sh(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runIn(t, append(d.at(0), args...)...)
}

// start starts etcdlock at the root.
func (d *deployment) start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startRaw(t, nil, append(d.at(0), args...)...)
}

// nameOn returns a name of this test whose slot the map gives cluster id
// (its first segment, its shard key, differs from name to name).
func (d *deployment) nameOn(t *testing.T, id string) string {
	t.Helper()
	for {
		name := strings.ReplaceAll(embedtest.UniqueName(t, "cli"), "/", "-") + "/job"
		if got, _ := d.r.ClusterOf(name); got == id {
			return name
		}
	}
}

// TestShardedRun: at the root, run, elect and observe take and watch each
// name on the cluster its slot is on (tokens of that cluster's generation;
// elect marks its own term); at a member that is not the root they refuse.
func TestShardedRun(t *testing.T) {
	d := startDeployment(t)
	for _, id := range []string{"a", "b"} {
		name := d.nameOn(t, id)
		p := d.start(t, "run", name)
		line := p.waitLine("holding")
		st, err := d.r.Describe(embedtest.Context(t, long), name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Cluster != id || st.Holder == nil || !strings.Contains(line, "token "+st.Holder.Token.String()) || st.Holder.Token.Generation() < 1 {
			t.Fatalf("run %s: printed %q; the name's state: cluster %s, holder %+v", name, line, st.Cluster, st.Holder)
		}
		p.signal(syscall.SIGINT)
		if code, _ := p.wait(); code != 0 {
			t.Fatalf("run %s: exit %d after SIGINT; stderr: %s", name, code, p.stderr.String())
		}
	}
	name := d.nameOn(t, "b")
	obs := d.start(t, "observe", name, "-o", "json")
	obs.waitLine(`"leader":false`)
	el := d.start(t, "elect", name, "v1", "-o", "json")
	el.waitLine(`"self":true`)
	obs.waitLine(`"value":"v1"`)
	if st := locktest.Describe(t, d.clis["b"], name); st.Holder == nil || st.Holder.Value != "v1" {
		t.Fatalf("the election on cluster b: %+v", st.Holder)
	}
	for _, p := range []*proc{el, obs} {
		p.signal(syscall.SIGINT)
		if code, _ := p.wait(); code != 0 {
			t.Fatalf("exit %d after SIGINT; stderr: %s", code, p.stderr.String())
		}
	}
	checkMemberRefusals(t, d, name)
}

// checkMemberRefusals checks that run, elect, observe and serve refuse
// cluster b, a member that is not the root.
func checkMemberRefusals(t *testing.T, d *deployment, name string) {
	t.Helper()
	for _, args := range [][]string{{"run", name, "--", "true"}, {"elect", name, "me", "--", "true"},
		{"observe", name}, {"serve", "--listen", "127.0.0.1:0"}} {
		code, _, stderr := runIn(t, append(d.at(1), args...)...)
		if code != 1 || !strings.Contains(stderr, "part of a sharded deployment but is not its root") {
			t.Fatalf("%v at a member: exit %d, %q; want a refusal", args, code, stderr)
		}
	}
}

// TestShardedServe: serve at the root holds each name on its own cluster
// (stream holds and the sessions API) and /v1/state says where.
func TestShardedServe(t *testing.T) {
	d := startDeployment(t)
	srv := startServer(t, d.cs[0].Endpoints())
	for _, id := range []string{"a", "b"} {
		name := d.nameOn(t, id)
		_, granted := srv.Hold(t, map[string]any{"name": name})
		st := locktest.Describe(t, d.clis[id], name)
		if st.Holder == nil || int64(st.Holder.Token) != servetest.TokenOf(t, granted) || st.Holder.Token.Generation() < 1 {
			t.Fatalf("hold of %s: %v; on cluster %s: %+v", name, granted, id, st.Holder)
		}
		code, state := srv.Do(t, "GET", "/v1/state?name="+name, nil)
		if code != http.StatusOK || state["cluster"] != id {
			t.Fatalf("/v1/state of %s: %d %v; want cluster %s", name, code, state, id)
		}
	}
	name := d.nameOn(t, "b")
	code, opened := srv.Do(t, "POST", "/v1/sessions", map[string]any{"ttl": "10s"})
	if code != http.StatusOK {
		t.Fatalf("open a session: %d %v", code, opened)
	}
	code, locked := srv.Do(t, "POST", fmt.Sprintf("/v1/sessions/%s/lock", opened["session"]), map[string]any{"name": name})
	if st := locktest.Describe(t, d.clis["b"], name); code != http.StatusOK || st.Holder == nil || int64(st.Holder.Token) != servetest.TokenOf(t, locked) {
		t.Fatalf("session lock of %s: %d %v; on cluster b: %+v", name, code, locked, st.Holder)
	}
}

// TestShardedOneClusterDown: with cluster b down, ls lists a's names and
// names b (exit 0), and ui starts, shows a's names and names b.
func TestShardedOneClusterDown(t *testing.T) {
	d := startDeployment(t)
	name := d.nameOn(t, "a")
	s, err := shard.NewSession(embedtest.Context(t, long), d.r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.NewMutex(name).Lock(embedtest.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	if err := d.cs[1].Close(); err != nil {
		t.Fatal(err)
	}
	checkLsDown(t, d, name)
	checkUIDown(t, d, name)
}

// checkLsDown checks that ls lists name on a and names b, which is down.
func checkLsDown(t *testing.T, d *deployment, name string) {
	t.Helper()
	code, out, stderr := d.sh(t, "ls", "-o", "json")
	var got []lsJSON
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 1 || got[0].Name != name || got[0].Cluster != "a" ||
		!strings.Contains(stderr, "cluster b (") || !strings.Contains(stderr, "did not answer") {
		t.Fatalf("ls -o json with b down: exit %d, %v, stderr %q:\n%s", code, err, stderr, out)
	}
	if code, out, _ := d.sh(t, "ls"); code != 0 || !strings.Contains(out, name) || !strings.Contains(out, "CLUSTER") {
		t.Fatalf("ls with b down: exit %d:\n%s", code, out)
	}
}

// checkUIDown checks that ui shows name on a and names b, which is down.
func checkUIDown(t *testing.T, d *deployment, name string) {
	t.Helper()
	p := d.start(t, "ui", "--listen", "127.0.0.1:0")
	url := waitStderr(t, p, regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/`))
	page := waitPage(t, url, func(pg shardedPage) bool { return pg.Loaded && len(pg.Locks) == 1 && pg.Error != "" })
	if page.Locks[0].Name != name || len(page.Clusters) != 2 || page.Clusters[0].Error != "" ||
		page.Clusters[1].ID != "b" || page.Clusters[1].Error == "" || !strings.Contains(page.Error, "cluster b: ") {
		t.Fatalf("the page with b down: %+v", page)
	}
	p.signal(syscall.SIGINT)
	if code, _ := p.wait(); code != 0 {
		t.Fatalf("ui: exit %d after SIGINT; stderr: %s", code, p.stderr.String())
	}
}

// shardedPage is what TestShardedOneClusterDown reads of /api/locks.
type shardedPage struct {
	Loaded   bool   `json:"loaded"`
	Error    string `json:"error"`
	Clusters []struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	} `json:"clusters"`
	Locks []struct {
		Name string `json:"name"`
	} `json:"locks"`
}

// waitPage polls the page's /api/locks until cond holds.
func waitPage(t *testing.T, url string, cond func(shardedPage) bool) shardedPage {
	t.Helper()
	deadline := time.Now().Add(long)
	for {
		var page shardedPage
		resp, err := http.Get(url + "api/locks")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
		}
		if err == nil && cond(page) {
			return page
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed what was wanted: %+v %v", page, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMoveAbort: a move interrupted while it drains leaves its slot
// frozen; move --abort gives it up: status then shows no move, and the
// name is granted on its source again.
func TestMoveAbort(t *testing.T) {
	d := startDeployment(t)
	if code, _, stderr := d.sh(t, "move", "--slot", "1", "--abort", "--to", "b"); code != 1 || !strings.Contains(stderr, "--abort takes no --to") {
		t.Fatalf("move --abort --to: exit %d, %q", code, stderr)
	}
	name := d.nameOn(t, "a")
	s, err := shard.NewSession(embedtest.Context(t, long), d.r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l, err := s.NewMutex(name).Lock(embedtest.Context(t, long))
	if err != nil {
		t.Fatal(err)
	}
	mv := d.start(t, "move", "--name", name, "--to", "b")
	mv.waitLine("draining on a")
	mv.signal(syscall.SIGINT)
	if code, _ := mv.wait(); code != 1 || !strings.Contains(mv.stderr.String(), "--abort") {
		t.Fatalf("interrupted move: exit %d; stderr %s", code, mv.stderr.String())
	}
	code, out, stderr := d.sh(t, "move", "--name", name, "--abort")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("slot %d: the move from a to b aborted", shard.SlotOf(name))) {
		t.Fatalf("move --abort: exit %d, %q, %q", code, out, stderr)
	}
	if code, out, _ := d.sh(t, "status", name, "-o", "json"); code != 0 || strings.Contains(out, `"moving"`) || !strings.Contains(out, `"cluster": "a"`) {
		t.Fatalf("status after the abort: exit %d:\n%s", code, out)
	}
	if err := l.Unlock(embedtest.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := d.sh(t, "run", name, "--wait", "20s", "--", "true"); code != 0 {
		t.Fatalf("run after the abort: exit %d, %q", code, stderr)
	}
}
