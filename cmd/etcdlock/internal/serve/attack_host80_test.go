package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAttackServeHostIPv6NoPort: on port 80 a client may omit the port
// from Host (curl http://[::1]/ sends "Host: [::1]"); names then keeps
// the brackets ("[::1]" is no IP) and refuses the server's own address.
func TestAttackServeHostIPv6NoPort(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:80")
	if err != nil {
		t.Skipf("needs [::1]:80: %v", err)
	}
	c := embedtest.Start(t, embedtest.WithMembers(1))
	srv, err := New(c.TestClient(t), Config{State: func(context.Context, *clientv3.Client, string) (any, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, host := range []string{"[::1]:80", "[::1]", "localhost"} {
		req, _ := http.NewRequest("GET", "http://[::1]:80/v1/state?name=x", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s", fmt.Sprintf("Host %q on [::1]:80: %s; want 200", host, resp.Status))
		}
	}
}
