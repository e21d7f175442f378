//go:build unix

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRunLostBeforeStart: a grant lost between the grant and the command's
// start (a break there, while the lease is still valid) makes run exit with
// the lost-lock code without starting the command. It runs etcdlock in
// process, to break the grant at that point.
func TestRunLostBeforeStart(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	marker := filepath.Join(t.TempDir(), "started")
	broke := false
	beforeStart = func(g *grant) {
		resp, err := cli.Txn(embedtest.Context(t, long)).
			If(clientv3.Compare(clientv3.CreateRevision(g.key), "=", int64(g.token))).
			Then(clientv3.OpDelete(g.key)).Commit()
		if err != nil || !resp.Succeeded {
			t.Errorf("break %s: %v %v", g.key, resp, err)
			return
		}
		broke = true
		<-g.ctx.Done() // the library noticed: the grant is lost before the start
	}
	t.Cleanup(func() { beforeStart = func(*grant) {} })
	var stdout, stderr lockedBuffer
	args := append(endpointFlags(), append([]string{"run", name, "--"}, sh(`echo started > "$1"`, marker)...)...)
	code := execute(args, nil, &stdout, &stderr)
	if !broke {
		t.Fatal("the test hook did not break the grant")
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command started on a lost grant (marker: %v)", err)
	}
	if code != exitLost || !strings.Contains(stderr.String(), "lost before the command started") {
		t.Fatalf("run: exit %d, want %d; stderr: %s", code, exitLost, stderr.String())
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil {
		t.Errorf("lock held after run exited: %+v", st.Holder)
	}
}
