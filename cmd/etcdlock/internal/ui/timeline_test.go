package ui

import (
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
)

func entry(tok int64, who string) etcdlock.Entry {
	return etcdlock.Entry{Token: etcdlock.Token(tok), Identity: who, Lease: 7, Kind: "mutex"}
}

func TestEvents(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name          string
		before, after etcdlock.LockState
		want          []string // kind:token
	}{
		{"grant of a free lock", etcdlock.LockState{}, etcdlock.LockState{Holders: []etcdlock.Entry{entry(5, "a")}}, []string{"granted:5"}},
		{"a waiter joins", etcdlock.LockState{Holders: []etcdlock.Entry{entry(5, "a")}},
			etcdlock.LockState{Holders: []etcdlock.Entry{entry(5, "a")}, Waiters: []etcdlock.Entry{entry(6, "b")}}, []string{"waiting:6"}},
		{"hand-off", etcdlock.LockState{Holders: []etcdlock.Entry{entry(5, "a")}, Waiters: []etcdlock.Entry{entry(6, "b")}},
			etcdlock.LockState{Holders: []etcdlock.Entry{entry(6, "b")}}, []string{"ended:5", "granted:6"}},
		{"a waiter leaves", etcdlock.LockState{Holders: []etcdlock.Entry{entry(5, "a")}, Waiters: []etcdlock.Entry{entry(6, "b")}},
			etcdlock.LockState{Holders: []etcdlock.Entry{entry(5, "a")}}, []string{"ended:6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, ev := range events(change{name: "n", before: tc.before, after: tc.after}, 9, now) {
				got = append(got, ev.Kind+":"+etcdlock.Token(ev.Token).String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("events %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		holder      bool
		how         string
		live, known bool
		want        string
	}{
		{true, wentReleased, false, false, kindReleased},
		{false, wentReleased, false, false, kindLeft},
		{true, wentBroken, false, false, kindBroken},
		{false, wentExpired, false, false, kindExpired},
		{true, "", true, true, kindReleased}, // no barrier known: an older etcdlock
		{false, "", true, true, kindLeft},
		{true, "", false, true, kindExpired},
		{false, "", false, true, kindExpired},
		{true, "", true, false, kindEnded},
	} {
		ev := event{Kind: kindEnded, holder: tc.holder}
		classify(&ev, tc.how, tc.live, tc.known)
		if ev.Kind != tc.want {
			t.Errorf("%+v: %s, want %s", tc, ev.Kind, tc.want)
		}
	}
}

func TestTimelineKeepsTheLast(t *testing.T) {
	var tl timeline
	for i := 0; i < timelineSize+100; i++ {
		tl.add(event{Token: int64(i)})
	}
	evs := tl.since(0)
	if len(evs) != timelineSize || evs[0].Seq != 100 || evs[len(evs)-1].Seq != timelineSize+99 || evs[0].Token != 100 {
		t.Fatalf("since(0): %d events, %d..%d", len(evs), evs[0].Seq, evs[len(evs)-1].Seq)
	}
	if evs := tl.since(timelineSize + 98); len(evs) != 2 {
		t.Fatalf("since(last-1): %d events, want 2", len(evs))
	}
	if evs := tl.since(1 << 40); len(evs) != 0 {
		t.Fatalf("since(future): %d events", len(evs))
	}
}

func TestChart(t *testing.T) {
	var c chart
	t0 := time.Unix(1_796_000_000, 0)
	c.grant(t0, 1)
	c.grant(t0.Add(300*time.Millisecond), 1)
	c.grant(t0.Add(time.Second), 2)
	j := c.json(t0.Add(time.Second), 2)
	n := len(j.Grants)
	if n != chartLen || j.Grants[n-1] != 1 || j.Grants[n-2] != 2 || j.Waiters[n-1] != 2 || j.End != t0.Unix()+1 {
		t.Fatalf("chart end %d: grants ..%v waiters ..%v", j.End, j.Grants[n-3:], j.Waiters[n-3:])
	}
	j = c.json(t0.Add(time.Hour), 4)
	for i := range j.Grants {
		if j.Grants[i] != 0 || j.Waiters[i] != 4 {
			t.Fatalf("an hour later, bucket %d: %d grants %d waiters; want 0 and 4", i, j.Grants[i], j.Waiters[i])
		}
	}
}

func TestAddressHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true, "10.0.3.17": true,
		"locks.example:8080": false, "attacker.example": false, "": false,
	} {
		if got := addressHost(host); got != want {
			t.Errorf("addressHost(%q) = %v, want %v", host, got, want)
		}
	}
}
