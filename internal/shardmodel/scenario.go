package shardmodel

// Scenarios returns the scenarios the tests explore with every rule on
// (and, for the rule each needs, with it off). Together they are the
// model's bounds; see DESIGN.md, "Checking the move exhaustively", for what each covers.
func Scenarios() []Scenario {
	return []Scenario{
		// One move with ForceAfter, a Resume of it, two clients.
		{Name: "move", Clusters: 2, Dead: -1, Raise: -1,
			Movers:  []MoverSpec{{To: 1, Force: true}, {To: 1, Resume: true}},
			Clients: []int{1, 1}},
		// Two moves back and forth, a Resume of the first (any of them may
		// stall and wake after the others), one client acquiring twice.
		{Name: "backforth", Clusters: 2, Dead: -1, Raise: -1,
			Movers:  []MoverSpec{{To: 1}, {To: 0}, {To: 1, Resume: true}},
			Clients: []int{2}},
		// Three clusters: C0 to C1 to C2, a Resume of the first.
		{Name: "chain3", Clusters: 3, Dead: -1, Raise: -1,
			Movers:  []MoverSpec{{To: 1}, {To: 2}, {To: 1, Resume: true}},
			Clients: []int{2}},
		// One move, a Resume of it, an abort, two clients.
		{Name: "abort", Clusters: 2, Dead: -1, Raise: -1, Abort: true,
			Movers:  []MoverSpec{{To: 1}, {To: 1, Resume: true}},
			Clients: []int{1, 1}},
		// One move, an abort, a restore of C0 (while no move is recorded)
		// and its RaiseGeneration, two clients.
		{Name: "restore", Clusters: 2, Dead: -1, Raise: 0, Restore: true, Abort: true,
			Movers:  []MoverSpec{{To: 1}},
			Clients: []int{1, 1}},
		// The slot moved C0 to C1 earlier; a move back, an abort, a restore
		// of C0 to before the first move and its RaiseGeneration.
		{Name: "restoreback", Clusters: 2, Start: 1, Dead: -1, Raise: 0, Restore: true, Abort: true,
			Movers:  []MoverSpec{{To: 0}},
			Clients: []int{1, 1}},
		// One move, a restore of its source C0 at any point (also while
		// the move is recorded) and its RaiseGeneration, two clients; and
		// the same with an abort.
		{Name: "restoremid", Clusters: 2, Dead: -1, Raise: 0, Restore: true, RestoreMidMove: true,
			Movers:  []MoverSpec{{To: 1}},
			Clients: []int{1, 1}},
		{Name: "restoremid-abort", Clusters: 2, Dead: -1, Raise: 0, Restore: true, RestoreMidMove: true, Abort: true,
			Movers:  []MoverSpec{{To: 1}},
			Clients: []int{1, 1}},
		// One move and a RaiseGeneration of its source (no restore).
		{Name: "raise", Clusters: 2, Dead: -1, Raise: 0,
			Movers:  []MoverSpec{{To: 1}},
			Clients: []int{1, 1}},
		// Three clusters, C2 unreachable: a move to it, a move to C1, an
		// abort.
		{Name: "dead", Clusters: 3, Dead: 2, Raise: -1, Abort: true,
			Movers:  []MoverSpec{{To: 2}, {To: 1}},
			Clients: []int{1}},
	}
}

// LargeScenarios are wider bounds (48 s of CPU without the race
// detector): TestLargeScenarios explores them when
// ETCDLOCK_SHARDMODEL_LARGE=1.
func LargeScenarios() []Scenario {
	return []Scenario{
		{Name: "backforth-force", Clusters: 2, Dead: -1, Raise: -1,
			Movers:  []MoverSpec{{To: 1, Force: true}, {To: 0}, {To: 1, Resume: true}},
			Clients: []int{1, 1}},
		{Name: "backforth-2+1", Clusters: 2, Dead: -1, Raise: -1,
			Movers:  []MoverSpec{{To: 1}, {To: 0}, {To: 1, Resume: true}},
			Clients: []int{2, 1}},
		{Name: "backforth-abort", Clusters: 2, Dead: -1, Raise: -1, Abort: true,
			Movers:  []MoverSpec{{To: 1}, {To: 0}, {To: 1, Resume: true}},
			Clients: []int{1, 1}},
		{Name: "abort-force-2+1", Clusters: 2, Dead: -1, Raise: -1, Abort: true,
			Movers:  []MoverSpec{{To: 1, Force: true}, {To: 1, Resume: true}},
			Clients: []int{2, 1}},
		{Name: "chain3-2c", Clusters: 3, Dead: -1, Raise: -1,
			Movers:  []MoverSpec{{To: 1}, {To: 2}, {To: 1, Resume: true}},
			Clients: []int{1, 1}},
		{Name: "restore-backforth", Clusters: 2, Dead: -1, Raise: 0, Restore: true, Abort: true,
			Movers:  []MoverSpec{{To: 1}, {To: 0}},
			Clients: []int{1, 1}},
		{Name: "raise-abort", Clusters: 2, Dead: -1, Raise: 0, Abort: true,
			Movers:  []MoverSpec{{To: 1}, {To: 1, Resume: true}},
			Clients: []int{1, 1}},
	}
}

// ScenarioNamed returns the scenario of Scenarios called name.
func ScenarioNamed(name string) Scenario {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s
		}
	}
	panic("shardmodel: no scenario " + name)
}
