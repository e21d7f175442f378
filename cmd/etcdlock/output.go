package main

// This file holds the commands' output: the JSON shapes of status, ls,
// clusters, elect and observe (the shapes of a lock's state are
// internal/lockjson's, shared with serve and ui), the printers, and the
// text helpers the tables share.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// entryJSON and statusJSON are status's (and ls's) JSON shapes.
type (
	entryJSON  = lockjson.Entry
	statusJSON = lockjson.Status
)

// toEntryJSON is e with its lease's time left (ttls; nil: not read).
func toEntryJSON(e etcdlock.Entry, ttls map[clientv3.LeaseID]int64) entryJSON {
	return lockjson.FromEntry(e, ttls, time.Now())
}

// toStatusJSON is st with the leases' time left.
func toStatusJSON(st *etcdlock.LockState, ttls map[clientv3.LeaseID]int64) statusJSON {
	return lockjson.FromState(st, ttls, time.Now())
}

// lsJSON is one element of ls's JSON output.
type lsJSON struct {
	Name        string     `json:"name"`
	Kind        string     `json:"kind"`
	Size        int        `json:"size,omitempty"` // a semaphore's size
	Holder      *entryJSON `json:"holder"`
	Cluster     string     `json:"cluster,omitempty"` // in a sharded deployment
	HolderCount int        `json:"holder_count"`
	WaiterCount int        `json:"waiter_count"`
}

// clusterJSON is one element of clusters' JSON output.
type clusterJSON struct {
	ID          string   `json:"id"`
	Endpoints   []string `json:"endpoints"`
	Leader      string   `json:"leader"`
	Generation  int64    `json:"generation"`
	Slots       int      `json:"slots"`
	Held        int      `json:"names_held"`
	Waiters     int      `json:"waiters"`
	Leases      int      `json:"leases"`
	CommitsPerS float64  `json:"commits_per_second"`
	Moving      []string `json:"moving,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// leaderJSON is one line of elect's and observe's JSON output.
type leaderJSON struct {
	At       string `json:"at"` // when etcdlock saw the state (RFC 3339, its clock)
	Leader   bool   `json:"leader"`
	Value    string `json:"value,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Key      string `json:"key,omitempty"`
	Identity string `json:"identity,omitempty"`
	Lease    string `json:"lease,omitempty"`
	Self     bool   `json:"self,omitempty"`
}

// printJSON prints v as indented JSON (status, ls, clusters, once).
func (a *app) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return exitf(exitUsage, "encode JSON: %v", err)
	}
	fmt.Fprintf(a.stdout, "%s\n", b)
	return nil
}

// printLeader prints one leadership state, stamped with when it was seen;
// self marks this process's term.
func (a *app) printLeader(info etcdlock.LeaderInfo, self bool, output string) {
	at := time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00")
	if output == "json" {
		v := leaderJSON{At: at, Leader: info.Key != ""}
		if v.Leader {
			v.Value, v.Token, v.Key, v.Identity, v.Lease, v.Self = info.Value, int64(info.Token), info.Key, info.Identity, leaseHex(info.Lease), self
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(a.stdout, "%s\n", b)
		return
	}
	if info.Key == "" {
		fmt.Fprintf(a.stdout, "%s no leader\n", at)
		return
	}
	mark := ""
	if self {
		mark = " (this process)"
	}
	fmt.Fprintf(a.stdout, "%s leader %s token=%d identity=%s lease=%s%s\n", at,
		strconv.Quote(info.Value), info.Token, strconv.Quote(info.Identity), leaseHex(info.Lease), mark)
}

// plural returns "1 waiter", "2 waiters", "3 processes" and the like.
func plural(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case strings.HasSuffix(what, "s"):
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// leaseHex formats a lease ID as etcd and the key layout do.
func leaseHex(id clientv3.LeaseID) string { return lockjson.LeaseHex(id) }

// kindText is e's kind, with a semaphore's size ("semaphore of 3").
func kindText(e entryJSON) string {
	if e.Size > 0 {
		return fmt.Sprintf("%s of %d", e.Kind, e.Size)
	}
	return e.Kind
}

// inQueueText is how long e has been in the queue, "-" when its key does
// not say (the client's clock: a skewed clock shows a skewed age).
func inQueueText(e entryJSON) string { return secondsText(e.InQueue) }

// heldText is how long the holder e has held, "-" when its key does not say.
func heldText(e entryJSON) string { return secondsText(e.Held) }

// secondsText is a duration in seconds as status shows it, "-" for nil.
func secondsText(secs *float64) string {
	if secs == nil {
		return "-"
	}
	d := time.Duration(*secs * float64(time.Second))
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
