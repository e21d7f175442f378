package shardmodel

// This file holds the clients: sharded sessions that RunOnce one id on the
// name, routing by their own (possibly stale) map and cached stamps.

const (
	cRoute uint8 = iota
	cSend
	cWait
	cMark
	cRelease
	cDone
)

var clientSteps = [...][]step{
	cRoute:   {{"learn the map", (*Model).clientRefresh}, {"route", (*Model).clientRoute}},
	cSend:    {{"enqueue Txn", (*Model).clientSend}},
	cWait:    {{"wait", (*Model).clientWait}},
	cMark:    {{"MarkCompleted", (*Model).clientMark}},
	cRelease: {{"release", (*Model).clientRelease}},
	cDone:    nil,
}

// clientRefresh: the client's map catches up with the root's (its watch).
func (m *Model) clientRefresh(s *State, i int) bool {
	k := &s.K[i]
	if k.View == s.Root.Owner {
		return false
	}
	k.View = s.Root.Owner
	return true
}

// usable reports whether a write may be sent under st.
func (m *Model) usable(st stamp) bool {
	if m.Rules.GuardRequiresActiveStamp {
		return st.active()
	}
	return st.St != stNone
}

// clientRoute: the cluster of the client's map; its stamp there as cached
// if active, else read. Usable: send the enqueue; else wait (route again).
func (m *Model) clientRoute(s *State, i int) bool {
	k := &s.K[i]
	c := int(k.View)
	if m.closed(s, c) {
		return false
	}
	if !k.Cache[c].active() {
		k.Cache[c] = s.C[c].Stamp
	}
	if m.usable(k.Cache[c]) {
		k.Cl, k.PC = uint8(c), cSend
	}
	return true
}

// clientSend is the enqueue Txn: If(stamp mod == sent mod [and value ==
// sent value]) create the key, with the generation of the stamp sent;
// Else read the stamp (learnt) and route again.
func (m *Model) clientSend(s *State, i int) bool {
	k := &s.K[i]
	c := int(k.Cl)
	if m.closed(s, c) {
		return false
	}
	cur, sent := s.C[c].Stamp, k.Cache[c]
	if cur.Mod == sent.Mod && (!m.Rules.GuardComparesValue || cur.sameValue(sent)) {
		k.Key, k.PC = s.addKey(c, uint8(i+1), sent.Gen), cWait
		return true
	}
	k.Cache[c], k.PC = cur, cRoute
	return true
}

// clientWait: granted once its key is first, then RunOnce reads the
// record (done: skip the run); a key deleted meanwhile routes again.
func (m *Model) clientWait(s *State, i int) bool {
	k := &s.K[i]
	c := int(k.Cl)
	if m.closed(s, c) {
		return false
	}
	switch j := s.keyIndex(c, k.Key); {
	case j < 0:
		k.Key, k.PC = 0, cRoute
	case j > 0:
		return false
	case s.C[c].Rec != 0:
		k.PC = cRelease
	default:
		if s.X.Done != 0 {
			s.X.Bad = badRanAgain
		}
		k.PC = cMark
	}
	return true
}

// clientMark is MarkCompleted: Txn If(its key is there) put the record.
func (m *Model) clientMark(s *State, i int) bool {
	k := &s.K[i]
	c := int(k.Cl)
	if m.closed(s, c) {
		return false
	}
	if s.keyIndex(c, k.Key) >= 0 {
		s.C[c].Rec, s.C[c].RecMod = 1, s.write(c)
		s.X.Done = 1
	}
	k.PC = cRelease
	return true
}

// clientRelease deletes its key (if still there) and acquires again or
// returns.
func (m *Model) clientRelease(s *State, i int) bool {
	k := &s.K[i]
	c := int(k.Cl)
	if m.closed(s, c) {
		return false
	}
	s.delKey(c, k.Key)
	k.Key, k.Left, k.PC = 0, k.Left-1, cRoute
	if k.Left == 0 {
		k.PC = cDone
	}
	return true
}
