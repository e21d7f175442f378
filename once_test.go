package etcdlock

import (
	"errors"
	"strings"
	"testing"
)

// TestOnceKeyLayout: a completion record lives outside every queue and
// every barrier range (no queue read, List or Describe sees it) and inside
// the name's namespace prefix.
func TestOnceKeyLayout(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "jobs/a", "100%/x", "x%!", "x%!done"} {
		key, err := OnceKey(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := parseKey(key); ok {
			t.Errorf("record %q parses as a queue key", key)
		}
		if !strings.HasPrefix(key, NamespacePrefix(name)) {
			t.Errorf("record %q outside NamespacePrefix(%q)", key, name)
		}
		for _, other := range []string{name, name + "%", name + "!", "a", "jobs", "x"} {
			bp, _ := BarrierPrefix(other)
			if strings.HasPrefix(key, namePrefix(other)) || strings.HasPrefix(key, bp) {
				t.Errorf("record %q is inside the queue or barriers of %q", key, other)
			}
			if o, _ := OnceKey(other); other != name && o == key {
				t.Errorf("names %q and %q share the record %q", name, other, key)
			}
		}
	}
	if _, err := OnceKey(""); !errors.Is(err, ErrInvalidName) {
		t.Errorf("OnceKey(\"\") = %v", err)
	}
}
