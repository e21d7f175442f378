package etcdlock

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// FuzzNameEscaping checks the key layout on any name: escaping round-trips,
// the escaped name never contains the "%/" separator, keys parse back to the
// name, and two distinct names never share a key range.
func FuzzNameEscaping(f *testing.F) {
	for _, s := range []string{"a", "jobs/a", "jobs/a/b", "100%", "a%/b", "%2F", "\x00", "\x7f", "tab\t", "é", "%", "%%/"} {
		f.Add(s, s+"/x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, name := range []string{a, b} {
			checkNameRoundTrip(t, name)
		}
		if a != b && (strings.HasPrefix(namePrefix(a), namePrefix(b)) || strings.HasPrefix(namePrefix(b), namePrefix(a))) {
			t.Fatalf("names %q and %q share a key range", a, b)
		}
		// A name starting with a prefix lives under the prefix's namespace.
		if strings.HasPrefix(b, a) && !strings.HasPrefix(namePrefix(b), listPrefix(a)) {
			t.Fatalf("%q starts with %q but its keys are not under %q", b, a, listPrefix(a))
		}
	})
}

// FuzzParseToken checks that ParseToken never panics, accepts only positive
// decimals, and round-trips through String.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "9223372036854775807", "9223372036854775808", "", "+5", " 5", "05", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		if tok <= 0 {
			t.Fatalf("ParseToken(%q) = %d", s, tok)
		}
		again, err := ParseToken(tok.String())
		if err != nil || again != tok {
			t.Fatalf("round trip of %q: %d %v", s, again, err)
		}
	})
}

func TestKeyPrefix(t *testing.T) {
	if p := namePrefix("team-a/job"); p != "etcdlock/team-a/job%/" {
		t.Fatalf("namePrefix: %q", p)
	}
	if err := validateName(""); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("validateName(\"\") = %v", err)
	}
	if got := listPrefix("team-a/"); got != "etcdlock/team-a/" {
		t.Fatal(got)
	}
}

// checkNameRoundTrip checks that name's escaped form has no name end and
// unescapes back to name, and, for a valid name, that a waiter key of it
// parses back to it.
func checkNameRoundTrip(t *testing.T, name string) {
	t.Helper()
	esc := layout.EscapeName(name)
	if strings.Contains(esc, nameEnd) {
		t.Fatalf("escaped %q contains %q: %q", name, nameEnd, esc)
	}
	back, ok := layout.UnescapeName(esc)
	if !ok || back != name {
		t.Fatalf("round trip of %q: %q %v", name, back, ok)
	}
	if validateName(name) != nil {
		return
	}
	key, err := testhook.NewWaiterKey(namePrefix(name), tagMutex, 1)
	if err != nil {
		t.Fatal(err)
	}
	pk, ok := layout.ParseKey(key)
	if !ok || pk.Name != name || pk.Tag != tagMutex {
		t.Fatalf("ParseKey(%q) = %+v %v", key, pk, ok)
	}
}
