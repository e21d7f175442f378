package etcdlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

func TestKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		name, prefix string
	}{
		{"billing/nightly", "etcdlock/billing/nightly%/"},
		{"100%", "etcdlock/100%25%/"},
		{"a%/b", "etcdlock/a%25/b%/"},
		{"tab\there", "etcdlock/tab%09here%/"},
		{"nul\x00del\x7f", "etcdlock/nul%00del%7F%/"},
		{"ünïcode/名前", "etcdlock/ünïcode/名前%/"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkKeyLayout(t, tc.name, tc.prefix) })
	}
	if k := waiterKey("etcdlock/a%/", "m", 0x1a2b, 10); k != "etcdlock/a%/m/1a2b-a" {
		t.Fatalf("waiterKey = %q", k)
	}
	// No name's range contains another's, even when one name is a prefix of the other.
	checkNoNestedRanges(t, []string{"jobs/a", "jobs/a/b", "jobs/a%", "jobs/a%/m", "jobs/ab"})
	if !strings.HasPrefix(namePrefix("team-a/x"), listPrefix("team-a/")) || listPrefix("team-a/") != "etcdlock/team-a/" {
		t.Fatal("team prefix")
	}
	at := time.Date(2026, 12, 2, 5, 0, 0, 123456789, time.UTC)
	if v := decodeValue([]byte(encodeValue("host/1", "v\"x", at, time.Time{}, 0, 0))); v.V != 1 || v.Identity != "host/1" || v.Value != "v\"x" ||
		!v.enqueued().Equal(at.Truncate(time.Millisecond)) {
		t.Fatalf("value round trip: %+v", v)
	}
	if got := encodeValue("i", "", at, time.Time{}, 0, 0); got != `{"v":1,"identity":"i","at":1796187600123}` {
		t.Fatalf("value %s", got)
	}
	if v := decodeValue([]byte(`{"v":1,"identity":"i","value":""}`)); !v.enqueued().IsZero() {
		t.Fatalf("a value without at: enqueued %v, want zero", v.enqueued())
	}
}

// checkKeyLayout checks name's key prefix and that a waiter key of it
// parses back to it.
func checkKeyLayout(t *testing.T, name, prefix string) {
	t.Helper()
	if got := namePrefix(name); got != prefix {
		t.Fatalf("namePrefix = %q, want %q", got, prefix)
	}
	key, err := testhook.NewWaiterKey(namePrefix(name), tagMutex, 0x1a2b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, prefix+"m/1a2b-") {
		t.Fatalf("key %q", key)
	}
	pk, ok := layout.ParseKey(key)
	if !ok || pk.Name != name || pk.Tag != tagMutex {
		t.Fatalf("ParseKey(%q) = %+v, %v", key, pk, ok)
	}
}

// checkNoNestedRanges checks that no name's key range lies under another's.
func checkNoNestedRanges(t *testing.T, names []string) {
	t.Helper()
	for _, a := range names {
		for _, b := range names {
			if a != b && strings.HasPrefix(namePrefix(b), namePrefix(a)) {
				t.Fatalf("%q's keys lie under %q's prefix", b, a)
			}
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true}, {"a/b/c", true}, {"/", true}, {strings.Repeat("x", 1024), true},
		{"", false}, {strings.Repeat("x", 1025), false}, {"\xc3\x28", false},
	} {
		err := validateName(tc.name)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidName)) {
			t.Errorf("validateName(%.20q) = %v", tc.name, err)
		}
	}
}
