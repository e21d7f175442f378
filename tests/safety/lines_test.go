package safety

import (
	"strconv"
	"strings"
)

func parseInt(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

// leaseOfKey returns the lease of a queue key ".../<lease hex>-<random hex>".
func leaseOfKey(key string) int64 {
	last := key[strings.LastIndexByte(key, '/')+1:]
	hexLease, _, _ := strings.Cut(last, "-")
	v, _ := strconv.ParseUint(hexLease, 16, 64)
	return int64(v)
}

// lineFields is how many fields each line of a worker has: n > 0 exactly
// n, n < 0 at least -n, 0 any.
var lineFields = map[string]int{
	"SESSION": 2, "UNLOCK": 3, "LOCKLOST": 4, "GRANT": 4, "READ": -5, "WROTE": 5,
	"SESSION_LOST": -3, "SESSIONERR": 0, "LEASE_ALIVE": 3, "ENQ": 0, "UNLOCKED": 0, "LOCKERR": 0,
	"CANCELING": 3, "CANCELED": 3, "STATUS": -3,
}

// malformed reports a line of an unknown kind or with the wrong number of
// fields.
func malformed(f []string) bool {
	n, known := lineFields[f[0]]
	return !known || (n > 0 && len(f) != n) || (n < 0 && len(f) < -n)
}
