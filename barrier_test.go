package etcdlock

import (
	"reflect"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/layout"
)

// TestResumeFrom: a watch resumes after the last event it delivered, not
// after a catch-up batch's header revision (the store's current revision).
func TestResumeFrom(t *testing.T) {
	t.Parallel()
	ev := func(rev int64) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{ModRevision: rev}}
	}
	for _, tc := range []struct {
		name   string
		next   int64
		header int64
		events []*clientv3.Event
		want   int64
	}{
		{"catch-up batch", 10, 5000, []*clientv3.Event{ev(11), ev(1010)}, 1011},
		{"progress", 10, 50, nil, 51},
		{"old header", 100, 50, nil, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := clientv3.WatchResponse{Events: tc.events}
			setHeader(&resp, &etcdserverpb.ResponseHeader{Revision: tc.header})
			if got := resumeFrom(tc.next, resp); got != tc.want {
				t.Fatalf("resumeFrom(%d, header %d) = %d, want %d", tc.next, tc.header, got, tc.want)
			}
		})
	}
}

// setHeader sets resp's Header to h: a value before etcd client v3.6, a
// pointer since (the library reads resp.Header.Revision, which both allow).
func setHeader(resp *clientv3.WatchResponse, h *etcdserverpb.ResponseHeader) {
	f := reflect.ValueOf(resp).Elem().FieldByName("Header")
	if f.Kind() == reflect.Pointer {
		f.Set(reflect.ValueOf(h))
		return
	}
	f.Set(reflect.ValueOf(h).Elem())
}

// TestBarrierKeyLayout: a barrier lives outside every queue (no queue read,
// List or Describe sees it) and inside the name's namespace prefix.
func TestBarrierKeyLayout(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "jobs/a", "100%/x", "x%!"} {
		key := barrierKey(namePrefix(name), 0x2b38)
		bp := layout.BarrierPrefix(name)
		if key != bp+"2b38" {
			t.Errorf("barrierKey(%q) = %q, not under layout.BarrierPrefix %q", name, key, bp)
		}
		if _, ok := layout.ParseKey(key); ok {
			t.Errorf("barrier %q parses as a queue key", key)
		}
		if !strings.HasPrefix(key, listPrefix(name)) {
			t.Errorf("barrier %q outside listPrefix(%q)", key, name)
		}
		for _, other := range []string{name, name + "%", name + "!", "a", "jobs"} {
			if strings.HasPrefix(key, namePrefix(other)) {
				t.Errorf("barrier %q is inside the queue of %q", key, other)
			}
		}
	}
}

// TestSessionOfKey: the barrier key of a name and lease parses back; queue
// keys, markers and other names' keys do not.
func TestSessionOfKey(t *testing.T) {
	for _, name := range []string{"a", "jobs/a/b", "100%/x", "%!/"} {
		dir := namePrefix(name)
		if n, l, ok := layout.SessionOfKey(barrierKey(dir, 0x6a67a22a34eda349)); !ok || n != name || l != 0x6a67a22a34eda349 {
			t.Errorf("%q: %q %x %v", name, n, l, ok)
		}
		for _, other := range []string{waiterKey(dir, tagMutex, 7, 0), dir[:len(dir)-len(nameEnd)] + layout.BrokenSuffix, completionKey(name)} {
			if _, _, ok := layout.SessionOfKey(other); ok {
				t.Errorf("%q parsed as a barrier", other)
			}
		}
	}
}
