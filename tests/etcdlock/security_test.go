package etcdlock_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// The security tests run on clusters of their own, with TLS (mutual) and
// etcd authentication on, and two teams whose roles cover exactly their
// names: team-a (user alice) gets readwrite on layout.ListPrefix("team-a/"),
// team-b (user bob) on layout.ListPrefix("team-b/"); team-a-read (user
// audrey, a dashboard) gets read on layout.ListPrefix("team-a/"). Nothing else
// is granted to them: every operation of the library must work with that
// alone.

// secret returns a password no other string in the test contains.
func secret(t testing.TB, who string) string {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return who + "-pw-" + hex.EncodeToString(b[:])
}

// secureCluster is a TLS + auth cluster with the two teams.
type secureCluster struct {
	*embedtest.Cluster
	root                          *clientv3.Client
	rootPW, alicePW, bobPW, audPW string
	alice, bob, audrey            *clientv3.Client
	leaseKeepAlive, authCall      string
}

// startSecure starts a cluster with TLS and auth (and opts), creates the
// teams' roles and users, and returns root, alice and bob clients, closed at
// cleanup.
func startSecure(t testing.TB, opts ...embedtest.Option) *secureCluster {
	t.Helper()
	sc := &secureCluster{
		rootPW:         secret(t, "root"),
		alicePW:        secret(t, "alice"),
		bobPW:          secret(t, "bob"),
		audPW:          secret(t, "audrey"),
		leaseKeepAlive: "/etcdserverpb.Lease/LeaseKeepAlive",
		authCall:       "/etcdserverpb.Auth/Authenticate",
	}
	sc.Cluster = embedtest.Start(t, append([]embedtest.Option{embedtest.WithTLS(), embedtest.WithAuth(sc.rootPW)}, opts...)...)
	sc.root = sc.Cluster.TestClient(t)
	ctx := embedtest.Context(t, time.Minute)
	for _, team := range []struct {
		role, user, pw, prefix string
		perm                   clientv3.PermissionType
	}{
		{"team-a", "alice", sc.alicePW, "team-a/", clientv3.PermissionType(clientv3.PermReadWrite)},
		{"team-b", "bob", sc.bobPW, "team-b/", clientv3.PermissionType(clientv3.PermReadWrite)},
		{"team-a-read", "audrey", sc.audPW, "team-a/", clientv3.PermissionType(clientv3.PermRead)},
	} {
		p := layout.ListPrefix(team.prefix)
		for _, step := range []func() error{
			func() error { _, err := sc.root.RoleAdd(ctx, team.role); return err },
			func() error {
				_, err := sc.root.RoleGrantPermission(ctx, team.role, p, clientv3.GetPrefixRangeEnd(p), team.perm)
				return err
			},
			func() error { _, err := sc.root.UserAdd(ctx, team.user, team.pw); return err },
			func() error { _, err := sc.root.UserGrantRole(ctx, team.user, team.role); return err },
		} {
			if err := step(); err != nil {
				t.Fatalf("set up %s: %v", team.role, err)
			}
		}
	}
	sc.alice = sc.clientAs(t, "alice", sc.alicePW)
	sc.bob = sc.clientAs(t, "bob", sc.bobPW)
	sc.audrey = sc.clientAs(t, "audrey", sc.audPW)
	return sc
}

// clientAs returns a client logged in as user, closed at cleanup.
func (sc *secureCluster) clientAs(t testing.TB, user, pw string) *clientv3.Client {
	t.Helper()
	cli, err := sc.ClientAs(user, pw)
	if err != nil {
		t.Fatalf("client as %s: %v", user, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// calls sums a method's calls over all members.
func (sc *secureCluster) calls(method string) int64 {
	var n int64
	for _, m := range sc.Members() {
		n += m.Calls(method)
	}
	return n
}

// rootKeys returns every key under the lock root, as root.
func (sc *secureCluster) rootKeys(t testing.TB, prefix string) []string {
	t.Helper()
	resp, err := sc.root.Get(embedtest.Context(t, 10*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// denied checks that err wraps etcd's permission error and that the call
// failed at once rather than waiting for its context.
func denied(t testing.TB, what string, err error, took time.Duration) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: succeeded, want permission denied", what)
	case !errors.Is(err, rpctypes.ErrPermissionDenied):
		t.Errorf("%s: %v, want an error wrapping rpctypes.ErrPermissionDenied", what, err)
	case took > 10*time.Second:
		t.Errorf("%s: failed only after %v; a refusal must end the call at once", what, took)
	default:
		t.Logf("%s: %v (after %v)", what, err, took.Round(time.Millisecond))
	}
}
