package etcdx

import (
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func TestIsLeaseNotFound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{rpctypes.ErrLeaseNotFound, true},
		{rpctypes.ErrGRPCLeaseNotFound, true},
		{fmt.Errorf("keepalive: %w", rpctypes.ErrLeaseNotFound), true},
		{errors.New("rpc error: code = NotFound desc = etcdserver: requested lease not found"), true},
		{rpctypes.ErrLeaseExist, false},
		{errors.New("lease not granted"), false},
	} {
		if got := IsLeaseNotFound(tc.err); got != tc.want {
			t.Errorf("IsLeaseNotFound(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
