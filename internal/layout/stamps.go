package layout

// The keys of sharding. In the root cluster:
//
//	etcdlock-shards/map              the slot map: which cluster owns each slot
//	etcdlock-shards/clusters/<id>    a cluster's endpoints and the highest generation given to it
//	etcdlock-shards/moves/<slot>     a move in progress (shard.Shards.MoveSlot)
//
// In every member cluster (the root may be one):
//
//	etcdlock-shards/generation       the cluster's generation
//	etcdlock-shards/slots/<slot>     the slot's stamp: active here (with the generation its tokens carry), or frozen
//
// "etcdlock-shards/" sorts before and outside "etcdlock/", so no name's
// keys and no List range contain these.

import (
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

const (
	Root             = "etcdlock-shards/"
	MapKey           = Root + "map"
	ClusterKeyPrefix = Root + "clusters/"
	MoveKeyPrefix    = Root + "moves/"
	GenerationKey    = Root + "generation"
	StampKeyPrefix   = Root + "slots/"
)

// ClusterKey is the root's record of cluster id.
func ClusterKey(id string) string { return ClusterKeyPrefix + id }

// MoveKey is the root's record of a move of slot.
func MoveKey(slot int) string { return fmt.Sprintf("%s%04d", MoveKeyPrefix, slot) }

// StampKey is slot's stamp in a member cluster.
func StampKey(slot int) string { return fmt.Sprintf("%s%04d", StampKeyPrefix, slot) }

// Stamp states. Only an active stamp lets a key of its slot be created;
// every other state (and no stamp) refuses.
const (
	StampActive   = "active"
	StampFrozen   = "frozen"   // the slot moved, or is moving, away (or a move to here was aborted)
	StampIncoming = "incoming" // a move to this cluster is under way and not yet active
)

// Stamp is a slot's stamp in one member cluster as read from etcd.
type Stamp struct {
	Mod int64  `json:"-"` // its mod revision; 0: no stamp (the slot was never here)
	Raw []byte `json:"-"` // its value as read (what a guard compares)

	State string `json:"state"`
	Gen   int64  `json:"gen"`
	To    string `json:"to,omitempty"`   // frozen by a move: where it went
	From  string `json:"from,omitempty"` // incoming: where it comes from
	// Move is the epoch of the last move that wrote the stamp: the root
	// revision at which that move was recorded (0: shard.Create). A mover
	// writes a stamp only while its epoch is below its own (first touch) or
	// equal to it in the state its own earlier phase left (DESIGN.md).
	Move int64 `json:"move,omitempty"`
}

// Active reports whether the stamp exists and lets keys be created.
func (st Stamp) Active() bool { return st.Mod > 0 && st.State == StampActive }

// Encode returns the stored form of the stamp.
func (st Stamp) Encode() string {
	b, _ := json.Marshal(st)
	return string(b)
}

// DecodeStamp decodes the stamp read in kvs (none: no stamp).
func DecodeStamp(kvs []*mvccpb.KeyValue) Stamp {
	if len(kvs) == 0 {
		return Stamp{}
	}
	var st Stamp
	if err := json.Unmarshal(kvs[0].Value, &st); err != nil {
		st = Stamp{State: "unreadable"}
	}
	st.Mod, st.Raw = kvs[0].ModRevision, kvs[0].Value
	return st
}
