package shards_test

import (
	"context"
	"errors"
	"slices"
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

// TestSetClusterEndpoints: a cluster's new endpoints (a link to the same
// cluster) are recorded with its generation kept; a Shards closes its
// client of the old ones (the grant on it is lost) and the next
// acquisition goes through the new ones. Bad calls change nothing.
func TestSetClusterEndpoints(t *testing.T) {
	d := startDeployment(t, 1, 1)
	ctx := testCtx(t, time.Minute)
	r := d.newShards(t)
	s := session(t, r)
	name := d.nameOn(t, "c1")
	l, err := etcdlock.NewMutex(s, name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, err := r.Client(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	link, err := d.clusters[1].NewLink()
	if err != nil {
		t.Fatal(err)
	}
	gen := generationOf(t, r, "c1")
	if err := etcdlock.SetClusterEndpoints(ctx, d.root, "c1", link.Endpoints()); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, old.Ctx(), "the client of the old endpoints to close")
	awaitDone(t, l.Context(), "the grant on the old client to end")
	// Another name of c1: name's key stays there until its lease, whose
	// client was closed, runs out.
	l2, err := etcdlock.NewMutex(s, d.nameOn(t, "c1")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() || l2.Token().Generation() != gen {
		t.Fatalf("token %s after %s, want above it, of generation %d", l2.Token(), l.Token(), gen)
	}
	cli, err := r.Client(ctx, "c1")
	if err != nil || !slices.Equal(cli.Endpoints(), link.Endpoints()) {
		t.Fatalf("client of c1: %v, %v; want the link's endpoints %v", cli.Endpoints(), err, link.Endpoints())
	}
	if got := generationOf(t, r, "c1"); got != gen {
		t.Fatalf("generation %d after the change, want %d", got, gen)
	}
	for _, tc := range []struct {
		id  string
		eps []string
	}{{"c9", link.Endpoints()}, {"c1", nil}, {"bad id", link.Endpoints()}} {
		if err := etcdlock.SetClusterEndpoints(ctx, d.root, tc.id, tc.eps); !errors.Is(err, etcdlock.ErrInvalidArgument) {
			t.Errorf("SetClusterEndpoints(%q, %v) = %v, want ErrInvalidArgument", tc.id, tc.eps, err)
		}
	}
}

// generationOf returns the generation the root records for cluster id, as
// r last read it.
func generationOf(t *testing.T, r *etcdlock.Shards, id string) int64 {
	t.Helper()
	for _, c := range r.Clusters() {
		if c.ID == id {
			return c.Generation
		}
	}
	t.Fatalf("no cluster %s", id)
	return 0
}

// awaitDone waits until ctx ends.
func awaitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
