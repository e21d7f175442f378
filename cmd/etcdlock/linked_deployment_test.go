//go:build unix

package main

import (
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// linkedDeployment is startDeployment with b reached through a link the
// test can cut (Hold: a black hole that accepts and never answers).
func linkedDeployment(t *testing.T) (*deployment, *embedtest.Link) {
	t.Helper()
	cs := embedtest.StartClusters(t, 2, embedtest.WithMembers(1))
	link, err := cs[1].NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	d := &deployment{cs: cs, clis: map[string]*clientv3.Client{"a": cs[0].TestClient(t), "b": cs[1].TestClient(t)}}
	if code, out, stderr := d.sh(t, "clusters", "init", "a="+strings.Join(cs[0].Endpoints(), ","),
		"b="+strings.Join(link.Endpoints(), ",")); code != 0 {
		t.Fatalf("clusters init: exit %d, %q, %q", code, out, stderr)
	}
	r, err := shard.New(embedtest.Context(t, long), d.clis["a"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	d.r = r
	return d, link
}

// TestAttackReadsWithBDown: with b black-holed (then killed), ls, status of
// a name on a and on b, and clusters end within the command timeout, with
// exits that say what happened.
