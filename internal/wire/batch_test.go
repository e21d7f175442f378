package wire

import (
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestBatchShrink: what a refused batch teaches the batcher.
func TestBatchShrink(t *testing.T) {
	t.Parallel()
	batch := make([]*batchCall, 10)
	for i := range batch {
		batch[i] = &batchCall{size: 100}
	}
	for _, tc := range []struct {
		name       string
		err        error
		ops, bytes int
	}{
		{"too many operations", rpctypes.ErrTooManyOps, 5, batchBytes},
		{"too large", rpctypes.ErrRequestTooLarge, batchOps, 500},
		{"a lease not found", rpctypes.ErrLeaseNotFound, batchOps, batchBytes},
		{"a permission", rpctypes.ErrPermissionDenied, batchOps, batchBytes},
		{"credentials", status.Error(codes.Unauthenticated, "token"), batchOps, batchBytes},
		{"nested Txns refused", status.Error(codes.InvalidArgument, "nested txn"), 5, batchBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBatcher(nil)
			b.shrink(tc.err, batch)
			if b.maxOps != tc.ops || b.maxBytes != tc.bytes {
				t.Fatalf("after %v: %d writes, %d bytes per batch; want %d, %d", tc.err, b.maxOps, b.maxBytes, tc.ops, tc.bytes)
			}
		})
	}
}
