package shardmodel

// This file holds the model's state: the member clusters, the root, the
// actors' local state and the ghost state the invariants read. Every field
// is a byte, so a State is compared and hashed as plain memory.

const (
	maxClusters = 3
	maxKeys     = 2 // one key a client at a time, two clients
	maxMovers   = 3
	maxClients  = 2
)

// Stamp states (internal/layout/stamps.go: StampActive, StampFrozen, StampIncoming).
const (
	stNone uint8 = iota
	stActive
	stFrozen
	stIncoming
)

// stamp is a slot's stamp on a member: its value (state, generation, move
// epoch) and its mod revision.
type stamp struct{ St, Gen, Ep, Mod uint8 }

func (p stamp) active() bool { return p.St == stActive }

// sameValue compares what Value(stamp) compares: everything but the mod.
func (p stamp) sameValue(q stamp) bool { return p.St == q.St && p.Gen == q.Gen && p.Ep == q.Ep }

// key is a queue key of the name: its create revision (0: no key), its
// client (1-based), the generation written in it, and whether it was first
// (granted) already.
type key struct{ Rev, Owner, Gen, Granted uint8 }

// member is one member cluster, holding the one slot's stamp, the name's
// queue and completion record, and the cluster's generation key.
type member struct {
	Rev    uint8 // the cluster's revision: every write Txn adds one
	Stamp  stamp
	GenKey uint8 // etcdlock-shards/generation
	Rec    uint8 // 1: the name's completion record says the run id is done
	RecMod uint8
	Down   uint8 // restored, not yet raised: 1 only RaiseGeneration reaches it, 2 movers and aborts too
	Keys   [maxKeys]key
}

// moveRec is the root's move record of the slot; Ep (its create revision,
// the move's epoch) is 0 when there is none.
type moveRec struct{ From, To, Ep, Mod uint8 }

// root is the root cluster: the map (the slot's owner), each cluster's
// recorded generation, the move record and the root's revision.
type root struct {
	Rev, Owner, MapMod uint8
	Gens               [maxClusters]uint8
	Move               moveRec
}

// mover is one MoveSlot call (P0..P8).
type mover struct {
	PC, From, E, RecMod, Gen, RecRead uint8
	Act, Re                           uint8          // the target is active under E; the drop re-froze once
	In, Fr                            stamp          // the stamps this move wrote (or found) on the target and the source
	Drain                             [maxKeys]uint8 // create revisions read by the drain
}

// client is one sharded session acquiring the name (RunOnce) Left times.
type client struct {
	PC, Left, View, Cl, Key uint8              // View: its map; Cl, Key: where its key is
	Cache                   [maxClusters]stamp // the stamps it knows, per cluster
}

// abort is one AbortMove call (A1..A4).
type abort struct{ PC, E, From, To, RecMod uint8 }

// raise is one RaiseGeneration call, after an optional restore.
type raise struct {
	PC, R, MapR, RecFrom, RecTo, RecEp, G uint8
	St                                    stamp // the stamp it read
}

// ghost is what the invariants need and no cluster holds.
type ghost struct {
	TokGen, TokRev uint8 // the token of the last grant
	Done           uint8 // 1: a run id was marked done (since the last restore)
	Forced         uint8 // cluster+1 whose key a force deleted in this step
	Bad            uint8 // a violation seen by a step (badRanAgain)
}

const badRanAgain = 1

// State is one state of the model.
type State struct {
	C    [maxClusters]member
	Root root
	M    [maxMovers]mover
	K    [maxClients]client
	A    abort
	G    raise
	X    ghost
}

// write is one write Txn on member c: it returns its revision.
func (s *State) write(c int) uint8 {
	if s.C[c].Rev == 250 {
		panic("shardmodel: member revision out of range")
	}
	s.C[c].Rev++
	return s.C[c].Rev
}

// rootWrite is one write Txn on the root: it returns its revision.
func (s *State) rootWrite() uint8 {
	if s.Root.Rev == 250 {
		panic("shardmodel: root revision out of range")
	}
	s.Root.Rev++
	return s.Root.Rev
}

// setStamp puts the stamp of member c and returns its mod revision.
func (s *State) setStamp(c int, st, gen, ep uint8) uint8 {
	mod := s.write(c)
	s.C[c].Stamp = stamp{St: st, Gen: gen, Ep: ep, Mod: mod}
	return mod
}

// addKey creates a queue key on member c (it sorts last) and returns its
// create revision.
func (s *State) addKey(c int, owner, gen uint8) uint8 {
	rev := s.write(c)
	for j := range s.C[c].Keys {
		if s.C[c].Keys[j].Rev == 0 {
			s.C[c].Keys[j] = key{Rev: rev, Owner: owner, Gen: gen}
			return rev
		}
	}
	panic("shardmodel: too many keys")
}

// keyIndex returns the index of the key of create revision rev on member c
// (0: it is first, it holds), or -1.
func (s *State) keyIndex(c int, rev uint8) int {
	for j, k := range s.C[c].Keys {
		if rev != 0 && k.Rev == rev {
			return j
		}
	}
	return -1
}

// delKey deletes the key of create revision rev on member c, if it is
// there (a write), keeping the rest in order.
func (s *State) delKey(c int, rev uint8) bool {
	j := s.keyIndex(c, rev)
	if j < 0 {
		return false
	}
	s.write(c)
	ks := &s.C[c].Keys
	copy(ks[j:], ks[j+1:])
	ks[len(ks)-1] = key{}
	return true
}

// raiseGen raises member c's generation above every generation the root
// records and its own (raiseGeneration in shard/admin.go: the root's record
// first, the member's key second; one step here) and returns it.
func (s *State) raiseGen(c int) uint8 {
	g := s.C[c].GenKey
	for _, r := range s.Root.Gens {
		g = max(g, r)
	}
	g++
	s.Root.Gens[c] = g
	s.rootWrite()
	s.C[c].GenKey = g
	s.write(c)
	return g
}
