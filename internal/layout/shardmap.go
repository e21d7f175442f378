package layout

// The root's records of sharding (their keys: stamps.go), frozen like the
// rest: the slot map at MapKey, which cluster owns each slot, stored as
// runs of slots; and a move in progress at MoveKey(slot). Package shard
// reads and writes them; a cluster's record (ClusterKey) is package shard's
// exported Cluster.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// SlotMap is the decoded map: Owner[s] is the id of the cluster of slot s.
type SlotMap struct {
	Rev   int64 // the map key's mod revision (0: none)
	Owner [NumSlots]string
}

// SlotRange is the stored form of a run of slots on one cluster.
type SlotRange struct {
	From    int    `json:"from"`
	To      int    `json:"to"`
	Cluster string `json:"cluster"`
}

// StoredMap is the stored form of the slot map: the value at MapKey.
type StoredMap struct {
	V      int         `json:"v"`
	Ranges []SlotRange `json:"ranges"`
}

// Encode returns the stored form of the map.
func (m *SlotMap) Encode() string {
	var sm StoredMap
	sm.V = 1
	for s := 0; s < NumSlots; s++ {
		if n := len(sm.Ranges); n > 0 && sm.Ranges[n-1].Cluster == m.Owner[s] && sm.Ranges[n-1].To == s-1 {
			sm.Ranges[n-1].To = s
			continue
		}
		sm.Ranges = append(sm.Ranges, SlotRange{From: s, To: s, Cluster: m.Owner[s]})
	}
	b, _ := json.Marshal(sm) // cannot fail: strings and ints
	return string(b)
}

// DecodeMap decodes the slot map read in kv. Its error wraps invalid
// (package shard passes etcdlock.ErrInvalidArgument).
func DecodeMap(kv *mvccpb.KeyValue, invalid error) (*SlotMap, error) {
	var sm StoredMap
	if err := json.Unmarshal(kv.Value, &sm); err != nil {
		return nil, fmt.Errorf("%w: slot map: %v", invalid, err)
	}
	m := &SlotMap{Rev: kv.ModRevision}
	for _, r := range sm.Ranges {
		if r.From < 0 || r.To >= NumSlots || r.From > r.To {
			return nil, fmt.Errorf("%w: slot map: range %d-%d", invalid, r.From, r.To)
		}
		for s := r.From; s <= r.To; s++ {
			m.Owner[s] = r.Cluster
		}
	}
	return m, nil
}

// SlotsOf returns the slots the map gives cluster id.
func (m *SlotMap) SlotsOf(id string) []int {
	var out []int
	for s, c := range m.Owner {
		if c == id {
			out = append(out, s)
		}
	}
	return out
}

// MoveRecord is the root's record of a move in progress. Its create
// revision in the root is the move's epoch.
type MoveRecord struct {
	Epoch int64 `json:"-"` // the record's create revision (not stored in the value)

	From  string `json:"from"`
	To    string `json:"to"`
	At    int64  `json:"at"` // unix milliseconds
	Owner string `json:"owner"`
}

// Encode returns the stored form of the record.
func (r MoveRecord) Encode() string {
	b, _ := json.Marshal(r) // cannot fail: strings and ints
	return string(b)
}

// DecodeMove decodes a move record read from the root; ok is false for a
// key or value that is not one.
func DecodeMove(kv *mvccpb.KeyValue) (slot int, rec MoveRecord, ok bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), MoveKeyPrefix))
	if err != nil || n < 0 || n >= NumSlots || json.Unmarshal(kv.Value, &rec) != nil {
		return 0, MoveRecord{}, false
	}
	rec.Epoch = kv.CreateRevision
	return n, rec, true
}

func (r MoveRecord) String() string {
	return fmt.Sprintf("from %s to %s, started %s by %s", r.From, r.To,
		time.UnixMilli(r.At).UTC().Format(time.RFC3339), r.Owner)
}
