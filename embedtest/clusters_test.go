package embedtest_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestStartClusters: several clusters in one process are independent: own
// endpoints, own directories, own data.
func TestStartClusters(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	cs := embedtest.StartClusters(t, 3, embedtest.WithMembers(1), embedtest.WithDir(dir))
	seen := map[string]bool{}
	for i, c := range cs {
		if want := filepath.Join(dir, "cluster-"+string(rune('0'+i))); c.Dir() != want {
			t.Errorf("cluster %d: Dir() = %s, want %s", i, c.Dir(), want)
		}
		for _, ep := range c.Endpoints() {
			if seen[ep] {
				t.Fatalf("endpoint %s is shared by two clusters", ep)
			}
			seen[ep] = true
		}
	}
	c0 := client(t, cs[0].Client)
	if _, err := c0.Put(ctx, "clusters/k", "v"); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs[1:] {
		r, err := client(t, c.Client).Get(ctx, "clusters/k")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != 0 {
			t.Fatalf("cluster %d sees cluster 0's key", i+1)
		}
	}
}

func TestNewClustersBadCount(t *testing.T) {
	if _, err := embedtest.NewClusters(testContext(t), 0); !errors.Is(err, embedtest.ErrInvalidOption) {
		t.Fatalf("NewClusters(0) = %v, want ErrInvalidOption", err)
	}
}
