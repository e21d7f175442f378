package etcdlock

import (
	"fmt"
	"strconv"
	"sync"
)

// TokenHeader is the HTTP header that carries a fencing token, in Token.String form.
const TokenHeader = "Fencing-Token"

// Token is a fencing token: the create revision of a grant's key. It is > 0
// and strictly increases from one grant of a name to the next, so a resource
// that remembers the highest token it has seen can reject a write from an
// older holder (see Fence). A token of a shard.Session also carries its
// cluster's generation above bit 44 (Token.Generation), so
// tokens of a name keep growing when its slot moves to another cluster
// (see package shard). Tokens of unrelated etcd clusters cannot be
// compared; after a restore from a snapshot they keep increasing only if the
// restore bumped the revision (etcdutl snapshot restore --bump-revision).
type Token int64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatInt(int64(t), 10) }

// ParseToken parses a decimal token as written by Token.String. It returns an
// error wrapping ErrInvalidArgument for anything that is not a decimal integer
// greater than zero.
func ParseToken(s string) (Token, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: token %q: %v", ErrInvalidArgument, s, err)
	}
	if v <= 0 {
		return 0, fmt.Errorf("%w: token %q: must be > 0", ErrInvalidArgument, s)
	}
	return Token(v), nil
}

// MarshalText implements encoding.TextMarshaler (decimal).
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts what ParseToken accepts.
func (t *Token) UnmarshalText(b []byte) error {
	v, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Fence is the check a protected resource makes: it admits a token only if no
// later holder was admitted before, so a holder whose lease expired while it
// was paused cannot overwrite the work, or undo the read, of the holder after
// it. It keeps two marks: the highest exclusive token (Admit) and the highest
// shared token (AdmitShared). An exclusive token must be at or above both (a
// writer is refused once a later reader or writer was admitted); a shared
// token must be at or above the highest exclusive one (a reader is refused once
// a later writer was admitted), while readers that hold together do not refuse
// each other. A token equal to an admitted one is the same grant again, since
// no two grants share a token. The zero value is ready to use; a Fence is safe
// for concurrent use. A Fence protects one resource (one lock name); keep
// Highest and HighestShared durable with the resource's data if the resource
// restarts.
type Fence struct {
	mu      sync.Mutex
	highest Token // highest exclusive token admitted
	shared  Token // highest shared token admitted
}

// Admit admits t for an exclusive grant: it returns nil when t is at or above
// both the highest exclusive and the highest shared token admitted so far, and
// t becomes the highest exclusive token. It returns an error wrapping
// ErrStaleToken, and records nothing, when t is below either of them (a later
// writer or reader was admitted), or t <= 0.
func (f *Fence) Admit(t Token) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stale(t); err != nil {
		return err
	}
	if t < f.shared {
		return fmt.Errorf("%w: token %d, highest shared token admitted %d", ErrStaleToken, t, f.shared)
	}
	f.highest = t
	return nil
}

// AdmitShared admits t for a shared grant (an RWMutex reader): it returns nil
// when t is at or above the highest exclusive token admitted, and t becomes the
// highest shared token if it is above it; readers that hold at once do not
// reject each other, in any order. It returns an error wrapping ErrStaleToken,
// and records nothing, when t is below the highest exclusive token (a later
// writer was admitted), or t <= 0.
func (f *Fence) AdmitShared(t Token) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stale(t); err != nil {
		return err
	}
	if t > f.shared {
		f.shared = t
	}
	return nil
}

// stale returns the error for a token that is not positive or is below the
// highest exclusive token admitted. f.mu is held.
func (f *Fence) stale(t Token) error {
	if t <= 0 {
		return fmt.Errorf("%w: token %d is not positive", ErrStaleToken, t)
	}
	if t < f.highest {
		return fmt.Errorf("%w: token %d, highest admitted %d", ErrStaleToken, t, f.highest)
	}
	return nil
}

// Highest returns the highest exclusive token admitted so far (by Admit), 0 if
// none.
func (f *Fence) Highest() Token {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest
}

// HighestShared returns the highest shared token admitted so far (by
// AdmitShared), 0 if none.
func (f *Fence) HighestShared() Token {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.shared
}
