//go:build unix

package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAttackServeSessionSetEndpoints: a /v1/sessions session (ttl 5s)
// holds a name on b; set-endpoints re-spells b's endpoints, which ends the
// server's cluster session on b (its lease is no longer renewed). The
// README says: count a session's locks as yours until your last answered
// keepalive plus the TTL. Wanted: keepalive fails once the lock's lease is
// gone, before anyone else is granted the name.
func TestAttackServeSessionSetEndpoints(t *testing.T) {
	d := startDeployment(t)
	srv := startServer(t, d.cs[0].Endpoints())
	name := d.nameOn(t, "b")
	code, opened := srv.do(t, "POST", "/v1/sessions", map[string]any{"ttl": "5s"})
	if code != http.StatusOK {
		t.Fatalf("open: %d %v", code, opened)
	}
	sid := opened["session"]
	code, locked := srv.do(t, "POST", fmt.Sprintf("/v1/sessions/%s/lock", sid), map[string]any{"name": name})
	if code != http.StatusOK {
		t.Fatalf("lock: %d %v", code, locked)
	}
	eps := d.cs[1].Endpoints()
	if code, out, stderr := d.sh(t, "clusters", "set-endpoints", "b", strings.Join(append(append([]string(nil), eps...), eps...), ",")); code != 0 {
		t.Fatalf("set-endpoints: %d %q %q", code, out, stderr)
	}
	// Keep the first session alive, as its client would, every second.
	stopKA := make(chan struct{})
	kaDone := make(chan []string)
	go func() {
		var log []string
		for {
			select {
			case <-stopKA:
				kaDone <- log
				return
			case <-time.After(time.Second):
			}
			resp, err := srv.c.Post(fmt.Sprintf("http://etcdlock/v1/sessions/%s/keepalive", sid), "application/json", nil)
			if err != nil {
				log = append(log, err.Error())
				continue
			}
			resp.Body.Close()
			log = append(log, fmt.Sprint(resp.StatusCode))
		}
	}()
	// A second holder, by stream, waits for the name.
	st, scode, first := srv.open(t, "/v1/hold", map[string]any{"name": name, "wait": "30s"})
	if scode == http.StatusServiceUnavailable {
		t.Logf("FINDING: a hold right after set-endpoints: %d %v; again", scode, first)
		time.Sleep(200 * time.Millisecond)
		st, scode, first = srv.open(t, "/v1/hold", map[string]any{"name": name, "wait": "30s"})
	}
	granted := first
	if scode != http.StatusOK {
		t.Fatalf("second hold: %d %v", scode, first)
	}
	var kaLog []string
	deadline := time.Now().Add(40 * time.Second)
	for granted["event"] != "granted" && time.Now().Before(deadline) {
		code, ka := srv.do(t, "POST", fmt.Sprintf("/v1/sessions/%s/keepalive", sid), nil)
		kaLog = append(kaLog, fmt.Sprintf("%d %v", code, ka["code"]))
		select {
		case m, ok := <-st.lines:
			if !ok {
				t.Fatal("second hold's stream ended")
			}
			granted = m
		case <-time.After(time.Second):
		}
	}
	t.Logf("keepalives while the second waited: %v", kaLog)
	close(stopKA)
	t.Logf("background keepalives: %v", <-kaDone)
	grantedAt := time.Now()
	t.Logf("second holder: %v", granted)
	code, ka := srv.do(t, "POST", fmt.Sprintf("/v1/sessions/%s/keepalive", sid), nil)
	t.Logf("keepalive of the first session after the second was granted: %d %v", code, ka)
	if code == http.StatusOK {
		t.Errorf("keepalive answered 200 at %v after another holder was granted %s (token %v); the session still lists token %v as its own",
			time.Since(grantedAt), name, granted["token"], locked["token"])
	}
	code, ul := srv.do(t, "POST", fmt.Sprintf("/v1/sessions/%s/unlock", sid), map[string]any{"name": name, "token": locked["token"]})
	t.Logf("unlock of the first: %d %v", code, ul)
}

// TestAttackServeStreamMoveAbort: a stream hold on a; a move to b drains;
// a second stream hold waits (the slot is frozen); the move is interrupted
// and aborted; the first lets go. Wanted: the second is granted on a, with a
// token above the first's, and nothing is left on b. Then a forced move of
// the held name: the stream gets "lost".
func TestAttackServeStreamMoveAbort(t *testing.T) {
	d := startDeployment(t)
	srv := startServer(t, d.cs[0].Endpoints())
	name := d.nameOn(t, "a")
	st1, g1 := srv.hold(t, map[string]any{"name": name})
	mv := d.start(t, "move", "--name", name, "--to", "b")
	mv.waitLine("draining on a")
	type opened struct {
		st    *stream
		code  int
		first map[string]any
	}
	oc := make(chan opened, 1)
	go func() {
		// srv.open only uses t for Fatal on transport errors.
		st, code, first := srv.open(t, "/v1/hold", map[string]any{"name": name, "wait": "60s"})
		oc <- opened{st, code, first}
	}()
	time.Sleep(time.Second)
	mv.signal(2)
	if code, _ := mv.wait(); code != 1 {
		t.Fatalf("interrupted move: exit %d", code)
	}
	if code, out, stderr := d.sh(t, "move", "--name", name, "--abort"); code != 0 {
		t.Fatalf("abort: %d %q %q", code, out, stderr)
	}
	st1.close()
	o2 := <-oc
	st2, g2 := o2.st, o2.first
	if o2.code != http.StatusOK || g2["event"] != "granted" {
		t.Fatalf("second hold: %d %v", o2.code, g2)
	}
	t.Logf("first %v, second %v", g1["token"], g2["token"])
	if tokenOf(t, g2) <= tokenOf(t, g1) {
		t.Errorf("second token %v not above first %v", g2["token"], g1["token"])
	}
	if st := describe(t, d.clis["a"], name); st.Holder == nil || int64(st.Holder.Token) != tokenOf(t, g2) {
		t.Errorf("on a: %+v", st.Holder)
	}
	if st := describe(t, d.clis["b"], name); st.Holder != nil {
		t.Errorf("on b: %+v", st.Holder)
	}
	// A forced move now: the second's stream must say it lost.
	if code, _, stderr := d.sh(t, "move", "--name", name, "--to", "b", "--force-after", "500ms"); code != 0 {
		t.Fatalf("forced move: %d %s", code, stderr)
	}
	deadline := time.After(15 * time.Second)
	for {
		select {
		case m, ok := <-st2.lines:
			if ok && m["event"] == "alive" {
				t.Logf("alive after the forced move: %v", m)
				continue
			}
			t.Logf("second stream after the forced move: %v %v", m, ok)
			if !ok || m["event"] != "lost" {
				t.Errorf("want a lost line, got %v (open %v)", m, ok)
			}
			return
		case <-deadline:
			t.Errorf("the stream said nothing but alive 15 s after its key was broken by the move")
			return
		}
	}
}

// TestAttackServeSessionCut: as TestAttackServeSessionSetEndpoints, with
// b's link black-holed for 12 s instead (the session's lease on b runs
// out; the root stays up). Wanted: keepalive fails once the lock is gone.
func TestAttackServeSessionCut(t *testing.T) {
	d, link := linkedDeployment(t)
	srv := startServer(t, d.cs[0].Endpoints())
	name := d.nameOn(t, "b")
	code, opened := srv.do(t, "POST", "/v1/sessions", map[string]any{"ttl": "5s"})
	if code != http.StatusOK {
		t.Fatalf("open: %d %v", code, opened)
	}
	sid := opened["session"]
	code, locked := srv.do(t, "POST", fmt.Sprintf("/v1/sessions/%s/lock", sid), map[string]any{"name": name})
	if code != http.StatusOK {
		t.Fatalf("lock: %d %v", code, locked)
	}
	link.Hold()
	var kas []string
	for i := 0; i < 12; i++ {
		time.Sleep(time.Second)
		code, ka := srv.do(t, "POST", fmt.Sprintf("/v1/sessions/%s/keepalive", sid), nil)
		kas = append(kas, fmt.Sprintf("%d%v", code, ka["code"]))
	}
	link.Restore()
	t.Logf("keepalives during the cut: %v", kas)
	// Another client takes the name at the root.
	c2, out2, err2 := d.sh(t, "run", name, "--wait", "20s", "--", "true")
	t.Logf("run at the root after the cut: %d %q %q", c2, out2, err2)
	code, ka := srv.do(t, "POST", fmt.Sprintf("/v1/sessions/%s/keepalive", sid), nil)
	t.Logf("keepalive after another took the name: %d %v", code, ka)
	if c2 == 0 && code == http.StatusOK {
		t.Errorf("keepalive still 200 after the session's lock on b was lost and another run held %s", name)
	}
}
