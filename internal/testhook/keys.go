package testhook

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// NewWaiterKey returns a key in the frozen layout with a random waiter id,
// under dir (a name's prefix) with the kind tag tag, for tests that write
// keys by hand (as another build or tool could). It is written from the
// layout's description, not from the library's code, so that it checks
// the library against the layout. The tests of package etcdlock and those
// of the tests module share it.
func NewWaiterKey(dir, tag string, lease clientv3.LeaseID) (string, error) {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	return dir + tag + "/" + strconv.FormatInt(int64(lease), 16) + "-" + hex.EncodeToString(r[:]), nil
}
