package etcdlock

import (
	"testing"
)

func TestObserveSkipsButNeverRepeats(t *testing.T) {
	ch := make(chan LeaderInfo, 1)
	out := latest{ch: ch}
	a, b := LeaderInfo{Token: 1, Value: "a"}, LeaderInfo{Token: 2, Value: "b"}
	out.publish(LeaderInfo{}) // nobody leads
	if got := <-ch; got != (LeaderInfo{}) {
		t.Fatalf("first value %+v", got)
	}
	out.publish(LeaderInfo{}) // no change: nothing sent
	out.publish(a)
	out.publish(b) // replaces a, unread
	out.publish(a) // replaces b
	if got := <-ch; got != a {
		t.Fatalf("got %+v, want the newest, a", got)
	}
	out.publish(b)
	out.publish(a) // the reader last took a: drop b, send nothing
	select {
	case got := <-ch:
		t.Fatalf("repeated %+v", got)
	default:
	}
}
