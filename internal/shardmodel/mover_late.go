package shardmodel

// This file holds the mover's P5..P8.

// moverCopyRead is P5's read: Txn If(source stamp mod == frozenMod) read
// the name's completion record.
func (m *Model) moverCopyRead(s *State, i int) bool {
	mv := &s.M[i]
	f := int(mv.From)
	if m.down(s, f) {
		return false
	}
	mv.PC = mDone
	if m.epochGuard(s, f, mv.Fr) {
		mv.RecRead, mv.PC = s.C[f].Rec, mCopyPut
		if mv.RecRead == 0 {
			mv.PC = mActivate // nothing to copy
		}
	}
	return true
}

// moverCopyPut is P5's put: Txn If(target stamp mod == incomingMod) put
// the record.
func (m *Model) moverCopyPut(s *State, i int) bool {
	mv, t := &s.M[i], m.Scn.Movers[i].To
	if m.down(s, t) {
		return false
	}
	mv.PC = mDone
	if m.epochGuard(s, t, mv.In) {
		s.C[t].Rec, s.C[t].RecMod = 1, s.write(t)
		mv.PC = mActivate
	}
	return true
}

// moverActivate is P6: raise the target's generation, then Txn If(target
// stamp mod == incomingMod) put it active with epoch E. A failed compare
// reads the stamp: active with epoch E is another call's activation.
func (m *Model) moverActivate(s *State, i int) bool {
	mv, t := &s.M[i], m.Scn.Movers[i].To
	if m.down(s, t) {
		return false
	}
	g := s.C[t].GenKey
	if m.Rules.ActivateRaisesGeneration {
		g = s.raiseGen(t)
	}
	st := s.C[t].Stamp
	switch {
	case !m.Rules.ActivateCAS || m.sameStamp(s, t, mv.In):
		s.setStamp(t, stActive, g, mv.E)
		mv.Gen, mv.Act, mv.PC = g, 1, mDrop
	case st.St == stActive && st.Ep == mv.E:
		mv.Gen, mv.Act, mv.PC = st.Gen, 1, mDrop
	default:
		mv.PC = mDone
	}
	return true
}

// moverSwitch is P7: root Txn If(move record mod == the one recorded) put
// the map and delete the record. Failed: another call finished (the map
// gives the target) or the move was aborted; either way it returns.
func (m *Model) moverSwitch(s *State, i int) bool {
	mv := &s.M[i]
	rec := s.Root.Move
	mv.PC = mDone
	if !m.Rules.SwitchMapChecksRecord || rec.Ep != 0 && rec.Mod == mv.RecMod {
		s.Root.Owner = uint8(m.Scn.Movers[i].To)
		s.Root.MapMod = s.rootWrite()
		s.Root.Move = moveRec{}
	}
	return true
}

// moverDrop is P8, before P7 as in the code: Txn If(source stamp mod ==
// frozenMod, record mod == read) delete the source's completion record
// (the read and the Txn are one step: a record re-written between them
// fails the compare). A failed compare re-freezes the source once (the
// freeze's adoption) and drops again; failed again, the call stops.
func (m *Model) moverDrop(s *State, i int) bool {
	mv := &s.M[i]
	f := int(mv.From)
	if m.down(s, f) {
		return false
	}
	switch {
	case m.epochGuard(s, f, mv.Fr):
		if s.C[f].Rec != 0 {
			s.C[f].Rec, s.C[f].RecMod = 0, 0
			s.write(f)
		}
		mv.PC = mSwitch
	case mv.Re == 0:
		mv.Re, mv.PC = 1, mFreeze
	default:
		mv.PC = mDone
	}
	return true
}
