package shard

// This file holds the keys of sharding and their values. Like the queue's
// (keys.go), the layout is frozen: every build must agree on it.
//
// In the root cluster:
//
//	etcdlock-shards/map              the slot map: which cluster owns each slot
//	etcdlock-shards/clusters/<id>    a cluster's endpoints and the highest generation given to it
//	etcdlock-shards/moves/<slot>     a move in progress (MoveSlot)
//
// In every member cluster (the root may be one):
//
//	etcdlock-shards/generation       the cluster's generation
//	etcdlock-shards/slots/<slot>     the slot's stamp: active here (with the generation its tokens carry), or frozen
//
// Every key-creating write of a sharded session compares the mod revision of
// its name's stamp with the one it read as active (slotguard.go), exactly as
// it compares its session's barrier. "etcdlock-shards/" sorts before and
// outside "etcdlock/", so no name's keys and no List range contain these.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
)

// validateClusterID accepts 1-64 bytes of [A-Za-z0-9._-].
func validateClusterID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("%w: cluster id %q must have 1 to 64 bytes", etcdlock.ErrInvalidArgument, id)
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-", c) >= 0) {
			return fmt.Errorf("%w: cluster id %q: only letters, digits, '.', '_' and '-'", etcdlock.ErrInvalidArgument, id)
		}
	}
	return nil
}

// Cluster is one member cluster of a sharded deployment, as the root
// records it.
type Cluster struct {
	ID        string   `json:"-"`
	Endpoints []string `json:"endpoints"`
	// Generation is the highest generation ever given to the cluster
	// (RaiseGeneration records it here before the cluster's own key).
	Generation int64 `json:"generation"`
}

// slotMap is the decoded map: owner[s] is the id of the cluster of slot s.
type slotMap struct {
	rev   int64 // the map key's mod revision (0: none)
	owner [NumSlots]string
}

// slotRange is the stored form of a run of slots on one cluster.
type slotRange struct {
	From    int    `json:"from"`
	To      int    `json:"to"`
	Cluster string `json:"cluster"`
}

type storedMap struct {
	V      int         `json:"v"`
	Ranges []slotRange `json:"ranges"`
}

func (m *slotMap) encode() string {
	var sm storedMap
	sm.V = 1
	for s := 0; s < NumSlots; s++ {
		if n := len(sm.Ranges); n > 0 && sm.Ranges[n-1].Cluster == m.owner[s] && sm.Ranges[n-1].To == s-1 {
			sm.Ranges[n-1].To = s
			continue
		}
		sm.Ranges = append(sm.Ranges, slotRange{From: s, To: s, Cluster: m.owner[s]})
	}
	b, _ := json.Marshal(sm) // cannot fail: strings and ints
	return string(b)
}

func decodeMap(kv *mvccpb.KeyValue) (*slotMap, error) {
	var sm storedMap
	if err := json.Unmarshal(kv.Value, &sm); err != nil {
		return nil, fmt.Errorf("%w: slot map: %v", etcdlock.ErrInvalidArgument, err)
	}
	m := &slotMap{rev: kv.ModRevision}
	for _, r := range sm.Ranges {
		if r.From < 0 || r.To >= NumSlots || r.From > r.To {
			return nil, fmt.Errorf("%w: slot map: range %d-%d", etcdlock.ErrInvalidArgument, r.From, r.To)
		}
		for s := r.From; s <= r.To; s++ {
			m.owner[s] = r.Cluster
		}
	}
	return m, nil
}

// slotsOf returns the slots the map gives cluster id.
func (m *slotMap) slotsOf(id string) []int {
	var out []int
	for s, c := range m.owner {
		if c == id {
			out = append(out, s)
		}
	}
	return out
}

// moveRecord is the root's record of a move in progress. Its create
// revision in the root is the move's epoch.
type moveRecord struct {
	epoch int64 // the record's create revision (not stored in the value)

	From  string `json:"from"`
	To    string `json:"to"`
	At    int64  `json:"at"` // unix milliseconds
	Owner string `json:"owner"`
}

// decodeMove decodes a move record read from the root.
func decodeMove(kv *mvccpb.KeyValue) (slot int, rec moveRecord, ok bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), layout.MoveKeyPrefix))
	if err != nil || n < 0 || n >= NumSlots || json.Unmarshal(kv.Value, &rec) != nil {
		return 0, moveRecord{}, false
	}
	rec.epoch = kv.CreateRevision
	return n, rec, true
}

func (r moveRecord) info(slot int) MoveInfo {
	return MoveInfo{Slot: slot, From: r.From, To: r.To, Started: time.UnixMilli(r.At), Owner: r.Owner, Epoch: r.epoch}
}

func (r moveRecord) String() string {
	return fmt.Sprintf("from %s to %s, started %s by %s", r.From, r.To,
		time.UnixMilli(r.At).UTC().Format(time.RFC3339), r.Owner)
}
