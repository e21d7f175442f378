package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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

// leaseHex formats a lease ID as etcd and the key layout do.
func leaseHex(id clientv3.LeaseID) string { return lockjson.LeaseHex(id) }

// checkElection fails if name is used by another kind of recipe (Observe
// would retry that forever).
func (a *app) checkElection(e *etcdlock.Election) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.commandTimeout)
	defer cancel()
	if _, err := e.Leader(ctx); err != nil && !errors.Is(err, etcdlock.ErrNoLeader) {
		return exitf(exitUsage, "%s", libErr(err))
	}
	return nil
}

// watch checks that name is an election and starts observing it; stop ends
// the observation.
func (a *app) watch(s acquire.Session, name string) (e *etcdlock.Election, infos <-chan etcdlock.LeaderInfo, stop context.CancelFunc, err error) {
	e = s.NewElection(name)
	if err := a.checkElection(e); err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return e, e.Observe(ctx), stop, nil
}

// observe prints every leader change of name until interrupted.
func (a *app) observe(name, output string) error {
	// Observe needs a Session although it writes nothing: its lease holds
	// no key and is revoked on exit.
	return a.withSession(&holdOpts{ttl: defaultTTL}, quietOnSignal, func(h *held) error {
		h.sc.stop()
		_, infos, stop, err := a.watch(h.s, name)
		if err != nil {
			return err
		}
		defer stop()
		for {
			select {
			case info, ok := <-infos:
				if !ok {
					return errObserveEnded(name)
				}
				a.printLeader(info, false, output)
			case <-h.sigs:
				return nil
			}
		}
	})
}

// errObserveEnded is the error of an Observe channel closed under etcdlock.
func errObserveEnded(name string) error {
	return exitf(exitUsage, "observing election %q ended: the client was closed", name)
}
