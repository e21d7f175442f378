package etcdlock

import (
	"testing"

	"github.com/etcdlock/etcdlock/internal/layout"
)

func TestNameOfKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		name string
		ok   bool
	}{
		{"etcdlock/billing/nightly%/m/694d8c1e2b3a4f01-0", "billing/nightly", true},
		{"etcdlock/a%25b%/s3/1-2", "a%b", true},
		{"etcdlock/billing/nightly%!/694d8c1e2b3a4f01", "", false}, // barrier
		{"etcdlock/billing/nightly%!done", "", false},              // completion record
		{"other/key", "", false},
		{"etcdlock/x%/m", "", false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			if name, ok := layout.NameOfKey(tc.key); name != tc.name || ok != tc.ok {
				t.Fatalf("layout.NameOfKey = %q, %v; want %q, %v", name, ok, tc.name, tc.ok)
			}
		})
	}
}
