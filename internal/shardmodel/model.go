package shardmodel

import "fmt"

// MoverSpec is one MoveSlot call of a scenario.
type MoverSpec struct {
	To     int  // the target cluster
	Resume bool // MoveOptions.Resume: take up a recorded move to To (none: return)
	Force  bool // MoveOptions.ForceAfter: the force may start at any point of the drain
}

// Scenario is what runs: the clusters and the actors. Every cluster starts
// at generation 1 and the slot on cluster 0, where it stays unless Start
// names another cluster.
type Scenario struct {
	Name     string
	Clusters int         // 2 or 3
	Start    int         // 0, or the cluster an earlier move (epoch 3) took the slot to from 0
	Dead     int         // a cluster unreachable for the whole run, or -1
	Movers   []MoverSpec // at most 3
	Clients  []int       // acquisitions (RunOnce of one id) of each client, at most 2 clients
	Abort    bool        // one AbortMove call
	Raise    int         // the cluster of one RaiseGeneration call, or -1
	Restore  bool        // the raise follows a restore of that cluster to its first state
	// RestoreMidMove lets the restore happen while a move is recorded (by
	// default it waits for none).
	RestoreMidMove bool
}

// Model is a scenario run under rules.
type Model struct {
	Rules  Rules
	Scn    Scenario
	init   State
	snap   State // what a restore brings back: the state before any move
	actors []actor
}

type actorKind uint8

const (
	kMover actorKind = iota
	kClient
	kAbort
	kRaise
)

type actor struct {
	kind actorKind
	idx  int
	name string
}

// step is one atomic step of an actor: fn applies it to s and reports
// whether it was enabled (false: s is unchanged).
type step struct {
	name string
	fn   func(m *Model, s *State, i int) bool
}

// New returns the model of scn under rules.
func New(rules Rules, scn Scenario) *Model {
	if scn.Clusters < 2 || scn.Clusters > maxClusters || len(scn.Movers) > maxMovers || len(scn.Clients) > maxClients {
		panic("shardmodel: scenario out of the model's bounds")
	}
	m := &Model{Rules: rules, Scn: scn}
	m.init = m.initial()
	for i, mv := range scn.Movers {
		m.actors = append(m.actors, actor{kMover, i, fmt.Sprintf("mover%d(to C%d%s)", i, mv.To, map[bool]string{true: ",resume"}[mv.Resume])})
	}
	for i := range scn.Clients {
		m.actors = append(m.actors, actor{kClient, i, fmt.Sprintf("client%d", i)})
	}
	if scn.Abort {
		m.actors = append(m.actors, actor{kAbort, 0, "abort"})
	}
	if scn.Raise >= 0 {
		m.actors = append(m.actors, actor{kRaise, 0, fmt.Sprintf("raise(C%d)", scn.Raise)})
	}
	return m
}

// initial is the first state: cluster 0 owns the slot (stamp active,
// generation 1, epoch 0); the others have no stamp; no key, no record.
// With Start, an earlier move then took the slot to Start (the clients'
// maps still name cluster 0: stale).
func (m *Model) initial() State {
	var s State
	for c := 0; c < m.Scn.Clusters; c++ {
		s.C[c].GenKey = 1
		s.C[c].Rev = 1
		s.Root.Gens[c] = 1
	}
	s.setStamp(0, stActive, 1, 0)
	s.Root.Rev, s.Root.MapMod = 2, 2
	m.snap = s
	if t := m.Scn.Start; t != 0 {
		e := s.rootWrite() // the earlier move's record
		s.setStamp(0, stFrozen, 1, e)
		s.setStamp(t, stActive, s.raiseGen(t), e)
		s.Root.Owner, s.Root.MapMod = uint8(t), s.rootWrite()
	}
	for i, n := range m.Scn.Clients {
		s.K[i].Left = uint8(n)
	}
	if m.Scn.Restore {
		s.G.PC = rRestore
	} else {
		s.G.PC = rRoot
	}
	return s
}

// steps returns the steps actor a may take in s (none: it returned).
func (m *Model) steps(s *State, a actor) []step {
	switch a.kind {
	case kMover:
		return moverSteps[s.M[a.idx].PC]
	case kClient:
		return clientSteps[s.K[a.idx].PC]
	case kAbort:
		return abortSteps[s.A.PC]
	}
	return raiseSteps[s.G.PC]
}

// adminDone reports whether every mover, the abort and the raise returned.
func (m *Model) adminDone(s *State) bool {
	for _, a := range m.actors {
		if a.kind != kClient && len(m.steps(s, a)) > 0 {
			return false
		}
	}
	return true
}

func (m *Model) dead(c int) bool { return c == m.Scn.Dead }

// down reports whether member c cannot be reached now by a mover or an
// abort: restored, and no raise refused yet (see raiseCheck).
func (m *Model) down(s *State, c int) bool { return s.C[c].Down == 1 }

// closed reports whether member c cannot be reached now by a client:
// restored and not yet raised.
func (m *Model) closed(s *State, c int) bool { return s.C[c].Down != 0 }

// sameStamp is a mover's compare of member c's stamp with one it wrote or
// read: its mod revision, and (MoverComparesValue) its value.
func (m *Model) sameStamp(s *State, c int, want stamp) bool {
	cur := s.C[c].Stamp
	return cur.Mod == want.Mod && (!m.Rules.MoverComparesValue || cur.sameValue(want))
}

// epochGuard is the compare of a mover's member write: the member's stamp
// is still the one this move wrote (MemberWritesGuardedByEpoch).
func (m *Model) epochGuard(s *State, c int, want stamp) bool {
	return !m.Rules.MemberWritesGuardedByEpoch || m.sameStamp(s, c, want)
}
