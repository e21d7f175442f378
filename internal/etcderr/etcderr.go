// Package etcderr recognises etcd's errors for the library and the CLI
// (cmd/etcdlock lives under the library's path, so it may import this).
package etcderr

import (
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// IsLeaseNotFound reports etcd's "requested lease not found": the lease is
// gone (it ran out or was revoked). It looks for clientv3's error in err's
// chain, then for the server's text, which a gRPC status keeps when it
// crosses a wrapper that does not unwrap.
func IsLeaseNotFound(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrLeaseNotFound) ||
		strings.Contains(err.Error(), "requested lease not found"))
}
