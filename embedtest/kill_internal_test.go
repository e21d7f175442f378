package embedtest

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestKilledUnder: a request's panic becomes Unavailable when a Kill
// overtook the request (began after it) or was stopping the member when the
// request began (etcd's Status then reads a closed backend: etcd-io/etcd#22189);
// any other panic goes on.
func TestKilledUnder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		before    func(cc *callCounter) // before the request
		during    func(cc *callCounter) // inside the handler, before it panics
		recovered bool
	}{
		{"no kill", func(*callCounter) {}, func(*callCounter) {}, false},
		{"kill after the start", func(*callCounter) {}, func(cc *callCounter) { cc.kills.Add(1) }, true},
		{"began during a kill", func(cc *callCounter) { cc.killing.Store(true); cc.kills.Add(1) }, func(*callCounter) {}, true},
		{"began during a kill, panics after it", func(cc *callCounter) { cc.killing.Store(true); cc.kills.Add(1) },
			func(cc *callCounter) { cc.killing.Store(false) }, true},
		{"began after a kill", func(cc *callCounter) { cc.kills.Add(1) }, func(*callCounter) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := newCallCounter()
			tc.before(cc)
			var err error
			panicked := func() (p any) {
				defer func() { p = recover() }()
				_, err = cc.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/m"},
					func(context.Context, any) (any, error) {
						tc.during(cc)
						var tx *struct{ root int }
						return tx.root, nil // a nil dereference, as in a closed bolt transaction
					})
				return nil
			}()
			switch {
			case tc.recovered && (panicked != nil || status.Code(err) != codes.Unavailable):
				t.Fatalf("panic %v, err %v; want Unavailable", panicked, err)
			case !tc.recovered && panicked == nil:
				t.Fatalf("err %v; want the panic to go on", err)
			}
		})
	}
}
