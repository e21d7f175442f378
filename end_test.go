package etcdlock

import (
	"testing"

	"github.com/etcdlock/etcdlock/internal/layout"
)

// TestSessionOfKey: the barrier key of a name and lease parses back; queue
// keys, markers and other names' keys do not.
func TestSessionOfKey(t *testing.T) {
	for _, name := range []string{"a", "jobs/a/b", "100%/x", "%!/"} {
		dir := namePrefix(name)
		if n, l, ok := SessionOfKey(barrierKey(dir, 0x6a67a22a34eda349)); !ok || n != name || l != 0x6a67a22a34eda349 {
			t.Errorf("%q: %q %x %v", name, n, l, ok)
		}
		for _, other := range []string{waiterKey(dir, tagMutex, 7, 0), dir[:len(dir)-len(nameEnd)] + layout.BrokenSuffix, onceKey(name)} {
			if _, _, ok := SessionOfKey(other); ok {
				t.Errorf("%q parsed as a barrier", other)
			}
		}
	}
}
