package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/etcdlock/etcdlock"
)

// TestLibErrKeepsNamesAndCauses: libErr drops the library's one leading
// prefix and nothing else: a name or a cause that contains "etcdlock: "
// is printed as it is.
func TestLibErrKeepsNamesAndCauses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&etcdlock.Error{Op: "lock", Name: "nightly", Err: etcdlock.ErrLockLost}, `lock "nightly": lock lost`},
		{&etcdlock.Error{Op: "lock", Name: "team etcdlock: nightly", Err: etcdlock.ErrLockLost}, `lock "team etcdlock: nightly": lock lost`},
		{&etcdlock.Error{Op: "run", Name: "n", Err: fmt.Errorf("%w: etcdlock: the job's own text", etcdlock.ErrInvalidArgument)}, `run "n": invalid argument: etcdlock: the job's own text`},
		{errors.New("connection refused"), "connection refused"},
	} {
		if got := libErr(tc.err); got != tc.want {
			t.Errorf("libErr(%q) = %q, want %q", tc.err.Error(), got, tc.want)
		}
	}
}
