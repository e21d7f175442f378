package shards_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
)

// TestCheckEndpoints: endpoints of a live cluster answer; a port nobody
// listens on, or no endpoints, is ErrInvalidArgument.
func TestCheckEndpoints(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1))
	for _, tc := range []struct {
		name string
		eps  []string
		want string // "" for nil
	}{
		{"live", c.Endpoints(), ""},
		{"nobody there", []string{"http://127.0.0.1:1"}, "endpoints http://127.0.0.1:1 do not answer"},
		{"none", nil, "no endpoints"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := etcdlock.CheckEndpoints(testCtx(t, 2*time.Second), tc.eps, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (!errors.Is(err, etcdlock.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want ErrInvalidArgument with %q", err, tc.want)
			}
		})
	}
}
