//go:build linux

package safety

// The sharded cell's checks: Check's checkers on each name's history. The
// register's (linearizability, increments, tokens) judge the name's whole
// history, whatever cluster granted each token (a token of a later
// generation is above every earlier one by construction). The queue's
// (grants, FIFO, held) judge each cluster's record of the name's queue with
// that cluster's grants (a token's revision is its key's create revision
// there) and that cluster's probes, one epoch at a time: an epoch of a slot
// on a cluster ends when its stamp there stops being active (a move froze
// it, or an abort fenced it), so a waiter whose key a move took away
// (ForceAfter) and who routes again, to the other cluster and later back
// here, starts a new epoch: the checkers see its keys of each epoch as
// those of a different lease.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// startSeededRecorder is startRecorder for a prefix that holds keys
// already (the stamps): they are its first events, at their mod revisions.
func startSeededRecorder(cli *clientv3.Client, prefix string) (*recorder, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	rctx, rcancel := context.WithCancel(context.Background())
	r := &recorder{cli: cli, prefix: prefix, cancel: rcancel, done: make(chan struct{}),
		lastRev: resp.Header.Revision, seen: make(chan struct{})}
	for _, kv := range resp.Kvs {
		r.events = append(r.events, recorded{rev: kv.ModRevision, key: string(kv.Key), create: kv.CreateRevision,
			lease: kv.Lease, value: append([]byte(nil), kv.Value...), arrived: monoNow()})
	}
	sort.Slice(r.events, func(i, j int) bool { return r.events[i].rev < r.events[j].rev })
	go r.run(rctx)
	return r, nil
}

// check stops the recorders and probers and judges each name's history.
func (sc *shardCell) check() map[string]*Report {
	events, probes := map[string][]recorded{}, map[string][]Probe{}
	for _, id := range sc.ids {
		evs, err := sc.recs[id].stop()
		if err != nil {
			sc.errorf("%s: %v", id, err)
		}
		events[id], probes[id] = evs, sc.prbs[id].stop()
	}
	reports := map[string]*Report{}
	for _, name := range shardNames {
		reports[name] = sc.checkName(name, events, probes)
	}
	return reports
}

// checkName runs the checkers on name's history.
func (sc *shardCell) checkName(name string, events map[string][]recorded, probes map[string][]Probe) *Report {
	dir := layout.NamePrefix(name)
	sc.mu.Lock()
	h := &History{Ops: append([]Op(nil), sc.ops[name]...), Grants: append([]Grant(nil), sc.grants[name]...), QueueDir: dir}
	sc.mu.Unlock()
	h.Final, h.Admissions, h.FinalAt = sc.regs[name].Value(), sc.regs[name].Admissions(), monoNow()
	r := &Report{Violations: map[Checker][]string{}}
	viz := (&cell{t: sc.t, cfg: cellConfig{name: "sharded-" + strings.NewReplacer("{", "", "}", "").Replace(name)}}).vizPath()
	var err error
	r.Linearizability, r.Visualization, err = CheckLinearizable(h, Options{Timeout: checkTimeout, VisualizationPath: viz})
	if err != nil {
		r.Violations[Linearizability] = []string{"visualization: " + err.Error()}
	}
	if r.Linearizability == porcupine.Unknown {
		r.Violations[Linearizability] = append(r.Violations[Linearizability], "inconclusive: the search did not finish")
	}
	add := func(c Checker, prefix string, msgs []string) {
		for _, m := range msgs {
			r.Violations[c] = append(r.Violations[c], prefix+m)
		}
	}
	add(Increments, "", CheckIncrements(h))
	add(Tokens, "", CheckTokens(h))
	matched := map[etcdlock.Token]bool{}
	for _, id := range sc.ids {
		qh := clusterHistory(h, shard.SlotOf(name), events[id], probes[id], matched)
		add(Grants, id+": ", checkGrants(qh, &r.Unbounded))
		add(FIFO, id+": ", CheckFIFO(qh))
		add(Held, id+": ", CheckHeld(qh))
	}
	for _, g := range h.Grants {
		if !matched[g.Token] {
			add(Grants, "", []string{fmt.Sprintf("grant of token %d (generation %d, revision %d, key %s) matches no key of any cluster's queue",
				g.Token, g.Token.Generation(), g.Token.Revision(), g.Key)})
		}
	}
	return r
}

// clusterHistory is the history of h's queue as one cluster recorded it
// (events), with the grants of h made there (marked in matched), their
// tokens their keys' create revisions, and each lease's keys of each epoch
// of slot there given a lease of their own.
func clusterHistory(h *History, slot int, events []recorded, probes []Probe, matched map[etcdlock.Token]bool) *History {
	stamp := fmt.Sprintf("etcdlock-shards/slots/%04d", slot)
	qh := &History{QueueDir: h.QueueDir, Probes: probes}
	type keyAt struct {
		key string
		rev int64
	}
	created := map[keyAt]bool{}
	synth := map[[2]int64]int64{}
	epoch := int64(0)
	for _, ev := range events {
		switch {
		case ev.key == stamp:
			if ev.delete || !stampActive(ev.value) {
				epoch++
			}
		case strings.HasPrefix(ev.key, h.QueueDir):
			lease := ev.lease
			if !ev.delete && ev.create == ev.rev {
				created[keyAt{ev.key, ev.rev}] = true
				id := [2]int64{ev.lease, epoch}
				if synth[id] == 0 {
					synth[id] = int64(len(synth) + 1)
				}
				lease = synth[id]
			}
			qh.Queue = append(qh.Queue, QueueEvent{Revision: ev.rev, Delete: ev.delete, Key: ev.key,
				CreateRevision: ev.create, Lease: lease, Arrived: ev.arrived})
		}
	}
	for _, g := range h.Grants {
		if created[keyAt{g.Key, g.Token.Revision()}] {
			matched[g.Token] = true
			g.Token = etcdlock.Token(g.Token.Revision())
			qh.Grants = append(qh.Grants, g)
		}
	}
	return qh
}

// stampActive reports whether a stamp's value says active (the layout is
// DESIGN.md's: JSON with "state").
func stampActive(v []byte) bool {
	var st struct {
		State string `json:"state"`
	}
	return json.Unmarshal(v, &st) == nil && st.State == "active"
}
