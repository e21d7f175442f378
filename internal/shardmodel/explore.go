package shardmodel

import (
	"hash/maphash"
	"unsafe"
)

// Result is what Explore found.
type Result struct {
	States      int      // distinct states reached
	Transitions int      // steps taken
	Depth       int      // the longest shortest path to a state
	Violation   string   // the first invariant broken ("" if none)
	Trace       []string // a shortest trace to it, one step a line
}

// Explore visits every state reachable from the first one, breadth first,
// with a set of the states seen (hashed, 64 bits), and stops at the first
// violation: breadth first, its trace is a shortest one. limit bounds the
// states (0: none); past it Explore panics, so that bounds are stated, not
// cut silently.
func (m *Model) Explore(limit int) Result {
	seed := maphash.MakeSeed()
	rootHash := hashState(seed, &m.init)
	seen := map[uint64]uint32{} // hash -> state id (> 0; the first state is rootHash)
	parent, label := []uint32{0}, []uint16{0}
	frontier, ids := []State{m.init}, []uint32{0}
	var res Result
	for len(frontier) > 0 {
		var next []State
		var nextIDs []uint32
		for j := range frontier {
			n := frontier[j] // a disabled step leaves n as it is: copy again only after an enabled one
			for a, act := range m.actors {
				for k, st := range m.steps(&frontier[j], act) {
					if !st.fn(m, &n, act.idx) {
						continue
					}
					res.Transitions++
					m.normalize(&n, act)
					lbl := uint16(a<<4 | k)
					if v := m.violation(&n); v != "" {
						res.States, res.Violation = len(parent), v
						res.Trace = m.trace(append(path(parent, label, ids[j]), lbl))
						return res
					}
					if h := hashState(seed, &n); seen[h] == 0 && h != rootHash {
						seen[h] = uint32(len(parent))
						nextIDs = append(nextIDs, uint32(len(parent)))
						parent, label, next = append(parent, ids[j]), append(label, lbl), append(next, n)
					}
					n = frontier[j]
				}
			}
		}
		if limit > 0 && len(parent) > limit {
			panic("shardmodel: more states than the limit")
		}
		if len(next) > 0 {
			res.Depth++
		}
		frontier, ids = next, nextIDs
	}
	res.States = len(parent)
	return res
}

// violation settles the step's grants and checks s: two holders first,
// then what the grants broke, then the rest.
func (m *Model) violation(s *State) string {
	v := m.settle(s)
	if w := m.check(s); w != "" && (v == "" || w[0] == '1') {
		return w
	}
	return v
}

// normalize forgets what actor a, if it returned, still holds, so that
// states differing only there are one.
func (m *Model) normalize(s *State, a actor) {
	switch {
	case a.kind == kMover && s.M[a.idx].PC == mDone:
		s.M[a.idx] = mover{PC: mDone}
	case a.kind == kClient && s.K[a.idx].PC == cDone:
		s.K[a.idx] = client{PC: cDone}
	case a.kind == kAbort && s.A.PC == aDone:
		s.A = abort{PC: aDone}
	case a.kind == kRaise && s.G.PC == rDone:
		s.G = raise{PC: rDone}
	}
}

// path returns the labels of the steps from the first state to state id.
func path(parent []uint32, label []uint16, id uint32) []uint16 {
	var out []uint16
	for ; id != 0; id = parent[id] {
		out = append(out, label[id])
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// hashState hashes s as memory: every field of State is a byte, so it has
// no padding.
func hashState(seed maphash.Seed, s *State) uint64 {
	return maphash.Bytes(seed, unsafe.Slice((*byte)(unsafe.Pointer(s)), unsafe.Sizeof(*s)))
}
