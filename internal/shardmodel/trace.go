package shardmodel

import (
	"fmt"
	"strings"
)

// trace replays the steps labels name from the first state and describes
// each with the state it leads to.
func (m *Model) trace(labels []uint16) []string {
	s := m.init
	out := []string{"start: " + m.describe(&s)}
	for _, l := range labels {
		a := m.actors[l>>4]
		st := m.steps(&s, a)[l&15]
		st.fn(m, &s, a.idx)
		m.normalize(&s, a)
		m.violation(&s)
		out = append(out, fmt.Sprintf("%s: %s -> %s", a.name, st.name, m.describe(&s)))
	}
	return out
}

var stateNames = [...]string{stNone: "none", stActive: "active", stFrozen: "frozen", stIncoming: "incoming"}

// describe sums up the shared state: the map and move record, then each
// cluster's stamp, keys and record.
func (m *Model) describe(s *State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "map C%d", s.Root.Owner)
	if r := s.Root.Move; r.Ep != 0 {
		fmt.Fprintf(&b, ", move C%d->C%d E%d", r.From, r.To, r.Ep)
	}
	for c := 0; c < m.Scn.Clusters; c++ {
		p := s.C[c].Stamp
		fmt.Fprintf(&b, " | C%d %s g%d E%d @%d", c, stateNames[p.St], p.Gen, p.Ep, p.Mod)
		if s.C[c].Down != 0 {
			b.WriteString(" down")
		}
		for _, k := range s.C[c].Keys {
			if k.Rev != 0 {
				fmt.Fprintf(&b, " key%d(client%d,g%d)", k.Rev, k.Owner-1, k.Gen)
			}
		}
		if s.C[c].Rec != 0 {
			b.WriteString(" done")
		}
	}
	return b.String()
}
