package etcdlock

import (
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/internal/layout"
)

// TestCompletionKeyLayout: a completion record lives outside every queue and
// every barrier range (no queue read, List or Describe sees it) and inside
// the name's namespace prefix.
func TestCompletionKeyLayout(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "jobs/a", "100%/x", "x%!", "x%!done"} {
		key := completionKey(name)
		if _, ok := layout.ParseKey(key); ok {
			t.Errorf("record %q parses as a queue key", key)
		}
		if !strings.HasPrefix(key, listPrefix(name)) {
			t.Errorf("record %q outside listPrefix(%q)", key, name)
		}
		for _, other := range []string{name, name + "%", name + "!", "a", "jobs", "x"} {
			bp := layout.BarrierPrefix(other)
			if strings.HasPrefix(key, namePrefix(other)) || strings.HasPrefix(key, bp) {
				t.Errorf("record %q is inside the queue or barriers of %q", key, other)
			}
			if o := completionKey(other); other != name && o == key {
				t.Errorf("names %q and %q share the record %q", name, other, key)
			}
		}
	}
}
