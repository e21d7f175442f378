package shardmodel

import "fmt"

// This file holds the invariants, checked on every state reached:
//
//  1. at most one holder: at most one cluster has a first key (within a
//     cluster the first key holds);
//  2. the tokens (generation, create revision) of successive grants
//     strictly grow;
//  3. a run id once marked done never runs again (a restore forgets);
//  4. at the end (every mover, abort and raise returned), the slot is not
//     stranded: the map's cluster has it active, or a move record is left
//     that a Resume or an AbortMove can act on (its target is reachable);
//  5. no force deletion makes a waiter the holder (a grant in passing).

// settle records the grants the step made (a key that became first) and
// returns the violation of invariant 2 or 5 they make, if any.
func (m *Model) settle(s *State) string {
	forced := int(s.X.Forced) - 1
	s.X.Forced = 0
	for c := 0; c < m.Scn.Clusters; c++ {
		h := &s.C[c].Keys[0]
		if h.Rev == 0 || h.Granted != 0 {
			continue
		}
		h.Granted = 1
		if c == forced {
			return fmt.Sprintf("5: a force on C%d granted the waiter of key %d in passing", c, h.Rev)
		}
		if h.Gen < s.X.TokGen || h.Gen == s.X.TokGen && h.Rev <= s.X.TokRev {
			return fmt.Sprintf("2: grant on C%d with token (%d,%d), not above the last (%d,%d)",
				c, h.Gen, h.Rev, s.X.TokGen, s.X.TokRev)
		}
		s.X.TokGen, s.X.TokRev = h.Gen, h.Rev
	}
	return ""
}

// check returns the violation of an invariant in s, if any ("" if none).
func (m *Model) check(s *State) string {
	holders := 0
	for c := 0; c < m.Scn.Clusters; c++ {
		if s.C[c].Keys[0].Rev != 0 {
			holders++
		}
	}
	if holders > 1 {
		return "1: two clusters hold the name"
	}
	if s.X.Bad == badRanAgain {
		return "3: a run id marked done runs again (its completion record was lost)"
	}
	if !m.adminDone(s) {
		return ""
	}
	rec, owner := s.Root.Move, int(s.Root.Owner)
	switch {
	case rec.Ep != 0 && m.dead(int(rec.To)):
		return fmt.Sprintf("4: stranded: a move record to unreachable C%d blocks the slot", rec.To)
	case rec.Ep == 0 && !s.C[owner].Stamp.active():
		return fmt.Sprintf("4: stranded: the map names C%d, where the slot is not active, and no move is recorded", owner)
	}
	return ""
}
