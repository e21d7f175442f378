package embedtest_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestNoSecurity: without the options, nothing of them shows.
func TestNoSecurity(t *testing.T) {
	if ca, cert, key := shared.TLSFiles(); ca != "" || cert != "" || key != "" {
		t.Errorf("TLSFiles = %q %q %q, want nothing", ca, cert, key)
	}
	if shared.ClientTLS() != nil {
		t.Error("ClientTLS without WithTLS")
	}
	if cfg := shared.ClientConfig(); cfg.TLS != nil || cfg.Username != "" || cfg.Password != "" {
		t.Errorf("ClientConfig has TLS %v, user %q", cfg.TLS != nil, cfg.Username)
	}
	if _, err := os.Stat(filepath.Join(shared.Dir(), "tls")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tls directory without WithTLS: %v", err)
	}
}

// checkRoot: with WithAuth("rootpw"), c's clients log in as root, member
// clients too, and auth is on; root is a client of c.
func checkRoot(t *testing.T, ctx context.Context, c *embedtest.Cluster, root *clientv3.Client) {
	t.Helper()
	if cfg := c.ClientConfig(); cfg.Username != "root" || cfg.Password != "rootpw" || cfg.TLS == nil {
		t.Errorf("ClientConfig: user %q, TLS %v; want root over TLS", cfg.Username, cfg.TLS != nil)
	}
	st, err := root.AuthStatus(ctx)
	if err != nil || !st.Enabled {
		t.Fatalf("AuthStatus = %v, %v; want enabled", st, err)
	}
	if u, err := root.UserGet(ctx, "root"); err != nil || len(u.Roles) != 1 || u.Roles[0] != "root" {
		t.Fatalf("root user: %v, %v", u, err)
	}
	for _, m := range c.Members() {
		mcli := client(t, m.Client)
		if _, err := mcli.Put(ctx, "auth/m", m.Name()); err != nil {
			t.Errorf("%s: Member.Client as root: %v", m.Name(), err)
		}
	}
}

// addAlice adds user alice (password alicepw) in role team-a, which may
// use the keys under team-a/.
func addAlice(t *testing.T, ctx context.Context, root *clientv3.Client) {
	t.Helper()
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "team-a"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "team-a", "team-a/", clientv3.GetPrefixRangeEnd("team-a/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "alice", "team-a"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAuth: WithAuth enables auth with a root user; the cluster's clients
// log in as root, ClientAs as anyone, and etcd enforces the roles. With TLS
// too, a client certificate alone (no common name) grants nothing.
func TestAuth(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithTLS(), embedtest.WithAuth("rootpw"))
	ctx := testContext(t)
	root := client(t, c.Client)
	checkRoot(t, ctx, c, root)
	addAlice(t, ctx, root)
	alice := client(t, func() (*clientv3.Client, error) { return c.ClientAs("alice", "alicepw") })
	if _, err := alice.Put(ctx, "team-a/k", "v"); err != nil {
		t.Errorf("alice in her range: %v", err)
	}
	if _, err := alice.Put(ctx, "team-b/k", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("alice outside her range: %v, want permission denied", err)
	}

	if cli, err := c.ClientAs("alice", "wrong"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		if cli != nil {
			cli.Close()
		}
		t.Errorf("ClientAs with a wrong password = %v, want ErrAuthFailed", err)
	}
	anon := client(t, func() (*clientv3.Client, error) { return c.ClientAs("", "") })
	if _, err := anon.Get(ctx, "team-a/k"); !errors.Is(err, rpctypes.ErrPermissionDenied) && !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Errorf("a client with a certificate and no user: %v, want permission denied or user empty", err)
	}
}

// TestAuthPlain: WithAuth without TLS; a client with no user is told so.
func TestAuthPlain(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithAuth("pw"), embedtest.WithAuthTokenTTL(7*time.Second))
	ctx := testContext(t)
	root := client(t, c.Client)
	if _, err := root.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	anon := client(t, func() (*clientv3.Client, error) { return c.ClientAs("", "") })
	if _, err := anon.Get(ctx, "k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Errorf("Get with no user = %v, want ErrUserEmpty", err)
	}
	if got := c.Members()[0].Server().Config().AuthTokenTTL; got != 7 {
		t.Errorf("AuthTokenTTL = %d, want 7", got)
	}
	if got := c.Members()[0].Server().Config().BcryptCost; got != 4 {
		t.Errorf("BcryptCost = %d, want 4", got)
	}
}

// jwtHead and jwtClaims are what TestJWT reads of a JWT.
type (
	jwtHead   struct{ Alg string }
	jwtClaims struct {
		Username string
		Exp      int64
	}
)

// decodeJWT decodes the header and claims of token, failing the test if it
// is not a JWT.
func decodeJWT(t *testing.T, token string) (head jwtHead, claims jwtClaims) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a JWT", token)
	}
	for i, v := range []any{&head, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			t.Fatalf("token part %d: %v", i, err)
		}
	}
	return head, claims
}

// TestJWT: WithJWT makes the members issue ES256 JWTs that expire after the
// WithAuthTokenTTL.
func TestJWT(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1), embedtest.WithAuth("pw"), embedtest.WithJWT(), embedtest.WithAuthTokenTTL(10*time.Second))
	ctx := testContext(t)
	root := client(t, c.Client)
	if _, err := root.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	at := c.Members()[0].Server().Config().AuthToken
	if !strings.HasPrefix(at, "jwt,") || !strings.Contains(at, "sign-method=ES256") || !strings.Contains(at, "ttl=10s") {
		t.Errorf("AuthToken = %q", at)
	}
	key := filepath.Join(c.Dir(), "tls", "jwt.key")
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("JWT key %s: %v; want readable by its owner only", key, err)
	}

	before := time.Now()
	resp, err := root.Authenticate(ctx, "root", "pw")
	if err != nil {
		t.Fatal(err)
	}
	head, claims := decodeJWT(t, resp.Token)
	exp := time.Unix(claims.Exp, 0)
	if head.Alg != "ES256" || claims.Username != "root" || exp.Before(before.Add(8*time.Second)) || exp.After(time.Now().Add(11*time.Second)) {
		t.Errorf("JWT alg %q user %q expires %v after the request; want ES256, root, 10s", head.Alg, claims.Username, exp.Sub(before))
	}
}

func TestInvalidSecurityOptions(t *testing.T) {
	ctx := testContext(t)
	for name, opts := range map[string][]embedtest.Option{
		"empty root password":  {embedtest.WithAuth("")},
		"zero token TTL":       {embedtest.WithAuthTokenTTL(0)},
		"negative token TTL":   {embedtest.WithAuthTokenTTL(-time.Second)},
		"sub-second token TTL": {embedtest.WithAuthTokenTTL(500 * time.Millisecond)},
		"fractional token TTL": {embedtest.WithAuthTokenTTL(1500 * time.Millisecond)},
		"JWT in a dir with ,":  {embedtest.WithMembers(1), embedtest.WithDir(filepath.Join(t.TempDir(), "a,b")), embedtest.WithJWT()},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := embedtest.New(ctx, opts...)
			if !errors.Is(err, embedtest.ErrInvalidOption) {
				t.Errorf("New = %v, want ErrInvalidOption", err)
			}
			if c != nil {
				t.Error("New returned a cluster with an error")
				_ = c.Close()
			}
		})
	}
}
