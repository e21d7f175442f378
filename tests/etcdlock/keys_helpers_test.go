package etcdlock_test

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// newWaiterKey returns a key in the frozen layout with a random waiter id,
// for tests that write keys by hand (as another build or tool could).
func newWaiterKey(dir, tag string, lease clientv3.LeaseID) (string, error) {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	return dir + tag + "/" + strconv.FormatInt(int64(lease), 16) + "-" + hex.EncodeToString(r[:]), nil
}
