package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestShardedDeployment drives the operators' commands on two clusters:
// clusters init, clusters (table and JSON), status of a sharded name (its
// cluster, slot and generation, and its move while it drains), move with
// its phases (draining while a holder holds, done once it lets go),
// clusters add, set-endpoints, raise and remove, and a bad move.
func TestShardedDeployment(t *testing.T) {
	cs := embedtest.StartClusters(t, 2, embedtest.WithMembers(1))
	root := []string{"--endpoints", strings.Join(cs[0].Endpoints(), ","), "--dial-timeout", "20s", "--command-timeout", "20s"}
	sh := func(args ...string) (int, string, string) {
		t.Helper()
		return runIn(t, append(append([]string(nil), root...), args...)...)
	}
	ids := []string{"a=" + strings.Join(cs[0].Endpoints(), ","), "b=" + strings.Join(cs[1].Endpoints(), ",")}
	if code, out, stderr := sh(append([]string{"clusters", "init"}, ids...)...); code != 0 || !strings.Contains(out, "2 clusters") {
		t.Fatalf("clusters init: exit %d, %q, %q", code, out, stderr)
	}
	if code, _, stderr := sh(append([]string{"clusters", "init"}, ids...)...); code == 0 || !strings.Contains(stderr, "already holds a slot map") {
		t.Fatalf("a second clusters init: exit %d, %q", code, stderr)
	}
	ctx := embedtest.Context(t, long)
	rootCli := cs[0].TestClient(t)
	r, err := shard.New(ctx, rootCli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	name := embedtest.UniqueName(t, "cli")
	from, _ := r.ClusterOf(name)
	to := map[string]string{"a": "b", "b": "a"}[from]
	s, err := shard.NewSession(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l, err := s.NewMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := sh("status", name)
	if want := fmt.Sprintf("lives on cluster %s (slot %d, generation %d)", from, shard.SlotOf(name), l.Token().Generation()); code != 0 ||
		!strings.Contains(out, want) || !strings.Contains(out, l.Token().String()) {
		t.Fatalf("status: exit %d, stderr %q, want %q and token %d in:\n%s", code, stderr, want, l.Token(), out)
	}
	checkClustersJSON(t, sh, from)
	checkLs(t, sh, name, from)

	checkMoveCommand(t, sh, root, name, from, to, l)
	checkClusterAdmin(t, sh, cs[1])
}

// checkLs checks that ls -o json shows name on cluster from.
func checkLs(t *testing.T, sh func(...string) (int, string, string), name, from string) {
	t.Helper()
	if code, out, _ := sh("ls", "-o", "json"); code != 0 || !strings.Contains(out, `"cluster": "`+from+`"`) || !strings.Contains(out, name) {
		t.Fatalf("ls -o json: exit %d:\n%s", code, out)
	}
}

// checkMoveCommand moves name's slot from from to to with etcdlock move
// while l holds it: the move drains until l lets go.
func checkMoveCommand(t *testing.T, sh func(...string) (int, string, string), root []string, name, from, to string, l *etcdlock.Lock) {
	t.Helper()
	ctx := embedtest.Context(t, long)
	mv := startRaw(t, nil, append(append([]string(nil), root...), "move", "--name", name, "--to", to)...)
	mv.waitLine("draining on " + from + ": 1 keys of 1 names left")
	checkStatusMoving(t, sh, name, from, to)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mv.waitLine(fmt.Sprintf("moved from %s to %s", from, to))
	if code, out := mv.wait(); code != 0 {
		t.Fatalf("move: exit %d, %q, %q", code, out, mv.stderr.String())
	}
	if code, out, _ := sh("status", name, "-o", "json"); code != 0 || !strings.Contains(out, `"cluster": "`+to+`"`) || strings.Contains(out, `"moving"`) {
		t.Fatalf("status -o json after the move: exit %d:\n%s", code, out)
	}
	if code, _, stderr := sh("move", "--slot", "5000", "--to", "a"); code != 1 || !strings.Contains(stderr, "not in 0..4095") {
		t.Fatalf("move of slot 5000: exit %d, %q", code, stderr)
	}
}

// checkStatusMoving checks that status says name's slot is moving from
// from to to, frozen on from, acquisitions waiting (text and JSON).
func checkStatusMoving(t *testing.T, sh func(...string) (int, string, string), name, from, to string) {
	t.Helper()
	code, out, stderr := sh("status", name)
	if want := fmt.Sprintf("is moving from %s to %s", from, to); code != 0 || !strings.Contains(out, want) ||
		!strings.Contains(out, "stamp on "+from+" is frozen: acquisitions wait until the move ends") {
		t.Fatalf("status during the move: exit %d, stderr %q, want %q and the frozen stamp in:\n%s", code, stderr, want, out)
	}
	code, out, _ = sh("status", name, "-o", "json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Moving == nil {
		t.Fatalf("status -o json during the move: exit %d, %v:\n%s", code, err, out)
	}
	if m := *st.Moving; m.From != from || m.To != to || m.Stamp != "frozen" || !m.AcquisitionsWait || m.Started == "" || m.Owner == "" {
		t.Fatalf("status -o json during the move: moving %+v", m)
	}
}

// checkClusterAdmin adds a cluster c: refused at endpoints that do not
// answer, recorded there with --force; moves it to c1's endpoints, raises
// it and removes it; and refuses to remove b, which has slots.
func checkClusterAdmin(t *testing.T, sh func(...string) (int, string, string), c1 *embedtest.Cluster) {
	t.Helper()
	eps := strings.Join(c1.Endpoints(), ",")
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"clusters", "add", "c", "http://127.0.0.1:1"}, 1, "", "do not answer"},
		{[]string{"clusters", "add", "c", "--force", "http://127.0.0.1:1"}, 0, "added cluster c", "recording them anyway (--force)"},
		{[]string{"clusters", "set-endpoints", "c", eps}, 0, "cluster c: endpoints " + eps, ""},
		{[]string{"clusters", "raise", "c"}, 0, "cluster c: generation", ""},
		{[]string{"clusters", "remove", "b"}, 1, "", "gives cluster b"},
		{[]string{"clusters", "remove", "c"}, 0, "removed cluster c", ""},
		{[]string{"clusters", "remove", "c"}, 1, "", "unknown cluster"},
	} {
		code, out, stderr := sh(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
			t.Fatalf("%v: exit %d, %q, %q; want %d, %q, %q", tc.args, code, out, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// checkClustersJSON checks clusters -o json: both clusters, every slot
// given, one name held on from.
func checkClustersJSON(t *testing.T, sh func(...string) (int, string, string), from string) {
	t.Helper()
	code, out, stderr := sh("clusters", "-o", "json", "--interval", "100ms")
	var got []clusterJSON
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 2 {
		t.Fatalf("clusters -o json: exit %d, %v, stderr %q:\n%s", code, err, stderr, out)
	}
	slots := 0
	for _, c := range got {
		slots += c.Slots
		if c.Generation < 1 || c.Leader == "" || c.Error != "" || (c.ID == from) != (c.Held == 1) {
			t.Fatalf("clusters: %+v", c)
		}
	}
	if slots != shard.NumSlots {
		t.Fatalf("clusters: %d slots in all", slots)
	}
	if code, out, _ := sh("clusters", "--interval", "100ms"); code != 0 || !strings.Contains(out, "COMMITS/S") {
		t.Fatalf("clusters: exit %d:\n%s", code, out)
	}
}
