package shardmodel

// This file holds AbortMove (A1..A4) and RaiseGeneration, after an optional
// restore.

const (
	aRead uint8 = iota
	aFence
	aUnfreeze
	aDelete
	aDone
)

var abortSteps = [...][]step{
	aRead:     {{"A1 read the move record", (*Model).abortRead}},
	aFence:    {{"A2 fence the target", (*Model).abortFence}},
	aUnfreeze: {{"A3 unfreeze the source", (*Model).abortUnfreeze}},
	aDelete:   {{"A4 delete the move record", (*Model).abortDelete}},
	aDone:     nil,
}

// abortAfter returns the abort's step after pc: A2 then A3, or (off) A3
// then A2; then A4.
func (m *Model) abortAfter(pc uint8) uint8 {
	first, second := aFence, aUnfreeze
	if !m.Rules.AbortFencesTargetFirst {
		first, second = second, first
	}
	switch pc {
	case aRead:
		return first
	case first:
		return second
	}
	return aDelete
}

func (m *Model) abortRead(s *State, _ int) bool {
	a, rec := &s.A, s.Root.Move
	a.PC = aDone
	if rec.Ep != 0 {
		a.E, a.From, a.To, a.RecMod = rec.Ep, rec.From, rec.To, rec.Mod
		a.PC = m.abortAfter(aRead)
	}
	return true
}

// abortFence is A2: the target's stamp becomes frozen with epoch E, unless
// it is active with E (refused: resume instead) or unreachable.
func (m *Model) abortFence(s *State, _ int) bool {
	a := &s.A
	t := int(a.To)
	if m.down(s, t) {
		return false
	}
	st := s.C[t].Stamp
	switch {
	case m.dead(t), st.Ep > a.E, m.Rules.AbortRefusesActiveTarget && st.active() && st.Ep == a.E:
		a.PC = aDone
	default:
		s.setStamp(t, stFrozen, st.Gen, a.E)
		a.PC = m.abortAfter(aFence)
	}
	return true
}

// abortUnfreeze is A3: the source's stamp becomes active with epoch E.
func (m *Model) abortUnfreeze(s *State, _ int) bool {
	a := &s.A
	f := int(a.From)
	if m.down(s, f) {
		return false
	}
	st := s.C[f].Stamp
	switch {
	case st.Ep > a.E:
		a.PC = aDone
		return true
	case st.active() && st.Ep < a.E && !m.Rules.AbortStampsSourceEpoch:
	default: // at the source's generation if a raise went past the stamp's
		s.setStamp(f, stActive, max(st.Gen, s.C[f].GenKey), a.E)
	}
	a.PC = m.abortAfter(aUnfreeze)
	return true
}

// abortDelete is A4: delete the record, guarded by its mod revision.
func (m *Model) abortDelete(s *State, _ int) bool {
	if rec := s.Root.Move; rec.Ep != 0 && rec.Mod == s.A.RecMod {
		s.Root.Move = moveRec{}
		s.rootWrite()
	}
	s.A.PC = aDone
	return true
}

const (
	rRestore uint8 = iota
	rRoot
	rCheck
	rMember
	rStamp
	rDone
)

var raiseSteps = [...][]step{
	rRestore: {{"restore the cluster to its state before any move", (*Model).raiseRestore}},
	rRoot:    {{"read the root at R", (*Model).raiseRoot}},
	rCheck:   {{"check the moves, raise the root's record", (*Model).raiseCheck}},
	rMember:  {{"raise the member's key, read its stamp", (*Model).raiseMember}},
	rStamp:   {{"re-stamp or freeze", (*Model).raiseStamp}},
	rDone:    nil,
}

// raiseRestore rolls the cluster back to its state before any move
// (revision, stamp, generation key; no key, no record) and keeps it from everyone but
// the raise until its stamp is re-written. A record lost so is the
// restore's loss: the ghost forgets what was done. Unless the scenario
// says RestoreMidMove, it happens only while no move is recorded.
func (m *Model) raiseRestore(s *State, _ int) bool {
	c := m.Scn.Raise
	if s.Root.Move.Ep != 0 && !m.Scn.RestoreMidMove {
		return false
	}
	s.C[c] = m.snap.C[c]
	s.C[c].Down = 1
	s.X.Done = 0
	s.G.PC = rRoot
	return true
}

// raiseRoot reads the map and the move record at root revision R.
func (m *Model) raiseRoot(s *State, _ int) bool {
	r, rec := &s.G, s.Root.Move
	r.R, r.MapR, r.RecFrom, r.RecTo, r.RecEp = s.Root.Rev, s.Root.Owner, rec.From, rec.To, rec.Ep
	r.PC = rCheck
	return true
}

// raiseCheck is movesAllowRaise (RaiseRefusesDuringMove): with a move from
// the cluster recorded at R, it reads the target's stamp; unless it is
// active under the move's epoch the raise refuses, nothing written, and is
// called again later (from its root read): the operator then opens the
// restored member to AbortMove and MoveSlot (Resume), not yet to clients.
// Passed, it raises the cluster's generation in the root's record (one
// step with the check).
func (m *Model) raiseCheck(s *State, _ int) bool {
	c, r := m.Scn.Raise, &s.G
	if m.refused(s, r, c) {
		*r = raise{PC: rRoot}
		if s.C[c].Down == 1 {
			s.C[c].Down = 2
		}
		return true
	}
	g := s.C[c].GenKey
	for _, x := range s.Root.Gens {
		g = max(g, x)
	}
	r.G = g + 1
	s.Root.Gens[c] = r.G
	s.rootWrite()
	r.PC = rMember
	return true
}

// refused reports whether the raise of cluster c refuses: a move from c
// recorded at R whose target's stamp is not active under its epoch.
func (m *Model) refused(s *State, r *raise, c int) bool {
	if !m.Rules.RaiseRefusesDuringMove || r.RecEp == 0 || int(r.RecFrom) != c {
		return false
	}
	st := s.C[r.RecTo].Stamp
	return !st.active() || st.Ep != r.RecEp
}

func (m *Model) raiseMember(s *State, _ int) bool {
	c, r := m.Scn.Raise, &s.G
	s.C[c].GenKey = r.G
	s.write(c)
	r.St, r.PC = s.C[c].Stamp, rStamp
	return true
}

// owned is ownership.gives: whether the root, read at R, gives the cluster
// c the active stamp st: st was written by a move recorded after R; or a
// move to c is recorded and wrote st; or no move of the slot is recorded
// and the map names c. A move from c recorded gives it nothing.
func (m *Model) owned(r *raise, c uint8, st stamp) bool {
	switch {
	case st.Ep > r.R:
		return true
	case r.RecEp != 0 && r.RecTo == c:
		return r.RecEp == st.Ep
	case r.RecEp != 0:
		return false
	}
	return r.MapR == c
}

// rewrites reports whether the raise writes the stamp st of cluster c: an
// active one; and (RaiseUnfreezesOwner) a frozen one when no move is
// recorded at R, the map names c and st's epoch is not above R: a move
// that ended before R froze it (a stalled P3 that found the restored
// stamp of an aborted move's source), and nothing else will unfreeze it.
func (m *Model) rewrites(r *raise, c int, st stamp) bool {
	if st.active() {
		return true
	}
	return m.Rules.RaiseUnfreezesOwner && st.St == stFrozen && r.RecEp == 0 && int(r.MapR) == c && st.Ep <= r.R
}

// raiseStamp re-stamps an active stamp the root gives the cluster with the
// new generation, and freezes (with it too) any other active stamp, each a
// CAS on the stamp read; it leaves a stamp not active. With no move
// recorded at R (RaiseStampsRootEpoch) either write carries epoch R at
// least: every move recorded before R has ended.
func (m *Model) raiseStamp(s *State, _ int) bool {
	c, r := m.Scn.Raise, &s.G
	st := r.St
	cas := !m.Rules.RaiseCAS || s.C[c].Stamp.Mod == st.Mod
	if !cas && m.Rules.RaiseUnfreezesOwner {
		r.St = s.C[c].Stamp // read it again, decide again
		return true
	}
	if m.rewrites(r, c, st) && cas {
		state, ep := stFrozen, st.Ep
		if m.owned(r, uint8(c), st) || !m.Rules.RaiseFreezesUnowned {
			state = stActive
		}
		if m.Rules.RaiseStampsRootEpoch && r.RecEp == 0 {
			ep = max(ep, r.R)
		}
		s.setStamp(c, state, r.G, ep)
	}
	s.C[c].Down = 0
	r.PC = rDone
	return true
}
