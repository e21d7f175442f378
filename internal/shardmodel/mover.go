package shardmodel

// This file holds the mover: one MoveSlot call, P0..P8 of the spec, each
// step one Txn (its compares and writes together) or one read.

const (
	mBegin uint8 = iota
	mPrepare
	mFreeze
	mDrainRead
	mDrain
	mCopyRead
	mCopyPut
	mActivate
	mDrop
	mSwitch
	mDone
)

var moverSteps = [...][]step{
	mBegin:     {{"P0+P1 contact the target, record the move", (*Model).moverBegin}},
	mPrepare:   {{"P2 prepare the target", (*Model).moverPrepare}},
	mFreeze:    {{"P3 freeze the source", (*Model).moverFreeze}},
	mDrainRead: {{"P4 read the source's keys", (*Model).moverDrainRead}},
	mDrain:     {{"P4 drained", (*Model).moverDrained}, {"P4 force one key", (*Model).moverForce}},
	mCopyRead:  {{"P5 read the source's record", (*Model).moverCopyRead}},
	mCopyPut:   {{"P5 put the record on the target", (*Model).moverCopyPut}},
	mActivate:  {{"P6 raise and activate the target", (*Model).moverActivate}},
	mDrop:      {{"P8 delete the source's record", (*Model).moverDrop}},
	mSwitch:    {{"P7 switch the map", (*Model).moverSwitch}},
	mDone:      nil,
}

// How a call of epoch e sees a stamp it reads.
const (
	older       = iota // an earlier move's: first touch
	ownIncoming        // this move's, incoming
	ownActive          // this move's, active
	ownFrozen          // this move's, frozen
	newer              // a later move's
)

func (m *Model) classify(st stamp, e uint8) int {
	switch {
	case st.Ep == e && st.St == stIncoming:
		return ownIncoming
	case st.Ep == e && st.St == stActive:
		return ownActive
	case st.Ep == e:
		return ownFrozen
	case st.Ep > e && m.Rules.StaleEpochStops:
		return newer
	}
	return older
}

// moverBegin is P0 (contact the target) and P1 (record the move, its epoch
// the record's revision), or a Resume taking up the recorded move.
func (m *Model) moverBegin(s *State, i int) bool {
	spec, mv := m.Scn.Movers[i], &s.M[i]
	to := uint8(spec.To)
	if m.Rules.ContactTargetFirst && m.down(s, spec.To) {
		return false
	}
	mv.PC = mDone
	switch rec := s.Root.Move; {
	case m.Rules.ContactTargetFirst && m.dead(spec.To):
	case rec.Ep != 0 && spec.Resume && rec.To == to:
		mv.E, mv.From, mv.RecMod, mv.PC = rec.Ep, rec.From, rec.Mod, mPrepare
	case rec.Ep != 0 || spec.Resume || s.Root.Owner == to:
		// ErrMoveInProgress, nothing to resume, or on to already.
	default:
		mv.From, mv.E = s.Root.Owner, s.rootWrite()
		mv.RecMod, mv.PC = mv.E, mPrepare
		s.Root.Move = moveRec{From: mv.From, To: to, Ep: mv.E, Mod: mv.E}
	}
	return true
}

// moverPrepare is P2: the target's stamp becomes incoming with epoch E.
func (m *Model) moverPrepare(s *State, i int) bool {
	mv, t := &s.M[i], m.Scn.Movers[i].To
	if m.dead(t) {
		mv.PC = mDone
		return true
	}
	if m.down(s, t) {
		return false
	}
	st := s.C[t].Stamp
	switch m.classify(st, mv.E) {
	case ownIncoming:
		mv.In, mv.PC = st, mFreeze
	case ownActive:
		mv.Gen, mv.Act, mv.PC = st.Gen, 1, mFreeze
	case ownFrozen, newer:
		mv.PC = mDone
	default:
		mv.In, mv.PC = st, mFreeze
		if m.Rules.PrepareTarget {
			s.setStamp(t, stIncoming, st.Gen, mv.E)
			mv.In = s.C[t].Stamp
		}
	}
	return true
}

// moverFreeze is P3: the source's stamp becomes frozen with epoch E. A
// call that knows the target active under E (a Resume, or the drop's
// retry) adopts the source instead: its own frozen stamp, or one older
// than E and not active (a raise after a restore froze it) frozen again
// under E; an active one older than E stops it. Then it drains, or (the
// target active) drops the source's record.
func (m *Model) moverFreeze(s *State, i int) bool {
	mv := &s.M[i]
	f := int(mv.From)
	if m.down(s, f) {
		return false
	}
	next := mDrainRead
	if mv.Act != 0 {
		next = mDrop
	}
	st := s.C[f].Stamp
	switch m.classify(st, mv.E) {
	case ownFrozen:
		mv.Fr, mv.PC = st, next
	case ownActive, ownIncoming, newer:
		mv.PC = mDone
	default:
		if mv.Act != 0 && st.active() {
			mv.PC = mDone
			return true
		}
		s.setStamp(f, stFrozen, st.Gen, mv.E)
		mv.Fr, mv.PC = s.C[f].Stamp, next
	}
	return true
}

// moverDrainRead is P4's one Txn: If(source stamp mod == frozenMod) read
// the slot's keys.
func (m *Model) moverDrainRead(s *State, i int) bool {
	mv := &s.M[i]
	f := int(mv.From)
	if m.down(s, f) {
		return false
	}
	mv.PC = mDone
	if m.epochGuard(s, f, mv.Fr) {
		for j, k := range s.C[f].Keys {
			mv.Drain[j] = k.Rev
		}
		mv.PC = mDrain
	}
	return true
}

// drainLeft returns the create revision of a key read by the drain and
// still on the source: the highest (tail) or the lowest, 0 if none.
func (m *Model) drainLeft(s *State, i int, tail bool) uint8 {
	mv := &s.M[i]
	var found uint8
	for _, rev := range mv.Drain {
		if s.keyIndex(int(mv.From), rev) < 0 {
			continue
		}
		if found == 0 || tail == (rev > found) {
			found = rev
		}
	}
	return found
}

// moverDrained ends P4 once every key read is gone.
func (m *Model) moverDrained(s *State, i int) bool {
	mv := &s.M[i]
	if m.down(s, int(mv.From)) || m.Rules.DrainWaits && m.drainLeft(s, i, true) != 0 {
		return false
	}
	mv.Drain, mv.PC = [maxKeys]uint8{}, mCopyRead
	return true
}

// moverForce deletes one key left (a chunk of one): Txn If(source stamp
// mod == frozenMod, the key's create revision unchanged).
func (m *Model) moverForce(s *State, i int) bool {
	mv := &s.M[i]
	f := int(mv.From)
	rev := m.drainLeft(s, i, m.Rules.ForceTailFirst)
	if !m.Scn.Movers[i].Force || m.down(s, f) || rev == 0 {
		return false
	}
	if !m.epochGuard(s, f, mv.Fr) {
		mv.PC = mDone
		return true
	}
	s.delKey(f, rev)
	s.X.Forced = uint8(f + 1)
	return true
}
