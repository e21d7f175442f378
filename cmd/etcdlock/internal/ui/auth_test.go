package ui

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestPermissionDenied: with etcd auth, a user whose role reads only
// team-a's names sees them under --prefix team-a/, and a clear message
// (not a blank page) for a prefix the role cannot read.
func TestPermissionDenied(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithAuth("rootpw"))
	root, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	ctx := embedtest.Context(t, long)
	team := layout.ListPrefix("team-a/")
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "team-a"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "team-a", team, clientv3.GetPrefixRangeEnd(team), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "alice", "team-a"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	alice, err := c.ClientAs("alice", "alicepw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alice.Close() })
	held := lock(t, alice, "team-a/nightly", "alice")

	_, all := startUI(t, alice, Config{})
	got := waitLocks(t, all, "", "the permission error", func(l locksJSON) bool { return l.Error != "" })
	if !strings.Contains(got.Error, "permission denied") || !strings.Contains(got.Error, "--prefix") || got.Loaded {
		t.Fatalf("error %q (loaded %v), want a permission message that suggests --prefix", got.Error, got.Loaded)
	}
	t.Run("page", func(t *testing.T) {
		b := browser(t) // skips without chromium
		run(t, b, long, "the message on the page", chromedp.Navigate(all.URL), chromedp.WaitVisible(css("#error")))
		msg := get(t, b, long, "the message", chromedp.Text(css("#error")))
		if !strings.Contains(msg, "permission denied") {
			t.Fatalf("the page says %q, want the permission message", msg)
		}
	})
	_, mine := startUI(t, alice, Config{Prefix: "team-a/"})
	got = waitLocks(t, mine, "", "team-a's lock", func(l locksJSON) bool { return len(l.Locks) == 1 })
	if got.Error != "" || got.Locks[0].Holder == nil || got.Locks[0].Holder.Token != int64(held.Token()) {
		t.Fatalf("%+v, want team-a/nightly held by alice", got)
	}
}
