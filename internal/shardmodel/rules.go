package shardmodel

// Rules are the rules of the spec (notes: "The sharded move protocol with
// epochs") that the model can switch off one at a time, to show that each
// is needed: with all on no interleaving within the bounds breaks an
// invariant; with any one off the explorer finds one that does. Each
// field names the file and function of the real code that enforces it.
type Rules struct {
	// GuardRequiresActiveStamp: a key-creating write is sent only under a
	// stamp known active; a cached stamp that is not active is not used
	// (errSlotMoved: route again). Off: the client routes and sends under
	// whatever stamp it read. Code: slotguard.go, queue.slotGuard (and
	// shardsession.go, Session.route).
	GuardRequiresActiveStamp bool
	// GuardComparesValue: the guard compares the stamp's value as well as
	// its mod revision, so a stamp re-written at the same mod revision after
	// a restore (revisions went back) does not pass. Code: slotguard.go,
	// queue.slotGuard.
	GuardComparesValue bool
	// ContactTargetFirst (P0): the mover reads from the target before it
	// records anything; an unreachable target is an error with nothing
	// written. Code: move.go, mover.begin (the contact before the record).
	ContactTargetFirst bool
	// PrepareTarget (P2): the target's stamp is written incoming with the
	// move's epoch before the source is frozen, and the copy (P5) and the
	// activation (P6) compare it. Off: they compare the target's stamp as
	// the mover first read it. Code: move_phases.go, mover.prepare.
	PrepareTarget bool
	// StaleEpochStops (P2, P3): a stamp of a later epoch, or of this epoch
	// in a state this phase does not expect, stops the mover. Off: only the
	// mod revision read is compared (first touch at any epoch). Code:
	// move_phases.go, mover.prepare and mover.freeze.
	StaleEpochStops bool
	// DrainWaits (P4): the mover goes on only once every key of the slot
	// read after the freeze is deleted. Code: move_phases.go, mover.drain.
	DrainWaits bool
	// ForceTailFirst (P4, ForceAfter): force deletes a name's keys highest
	// create revision first, the holder's last, so no waiter is granted in
	// passing. Code: move_phases.go, mover.force.
	ForceTailFirst bool
	// MemberWritesGuardedByEpoch (P4, P5, P8): the drain's read, each force
	// chunk, the read and the copy of completion records and their deletion
	// on the source compare the stamp this move wrote (frozenMod on the
	// source, incomingMod on the target). Code: move_phases.go, mover.drain,
	// mover.force, mover.copyCompletions and mover.dropCompletions.
	MemberWritesGuardedByEpoch bool
	// MoverComparesValue (NOT IN THE SPEC, proposed): where the mover
	// compares a member's stamp with one it wrote earlier (incomingMod,
	// frozenMod: P4..P8), it compares the stamp's value as well as its mod
	// revision, as the client's guard does: after a restore mod revisions
	// repeat, and a stamp re-written at incomingMod (a raise freezing it)
	// would let a late P6 of an aborted move activate the target. Code:
	// move_phases.go, mover.drain, mover.force, mover.copyCompletions,
	// mover.activate and mover.dropCompletions.
	MoverComparesValue bool
	// ActivateRaisesGeneration (P6): the target's generation is raised
	// above every generation the root records before it is activated. Code:
	// move_phases.go, mover.activate (raiseGeneration, shardadmin.go).
	ActivateRaisesGeneration bool
	// ActivateCAS (P6): the activation compares the target's stamp with
	// incomingMod. Off: a plain put. Code: move_phases.go, mover.activate.
	ActivateCAS bool
	// SwitchMapChecksRecord (P7): the map switch compares the move record's
	// mod revision with the one this move recorded. Code: move_phases.go,
	// mover.switchMap.
	SwitchMapChecksRecord bool
	// AbortFencesTargetFirst (A2 before A3): the target is fenced before the
	// source is unfrozen. Code: Shards.AbortMove.
	AbortFencesTargetFirst bool
	// AbortRefusesActiveTarget (A2): an abort refuses a move whose target is
	// active with its epoch (resume it instead). Code: Shards.AbortMove.
	AbortRefusesActiveTarget bool
	// AbortStampsSourceEpoch (A3): the source is re-stamped active with the
	// move's epoch even when it is active already (its freeze is still to
	// come), which fences a late P3. Off: an active source is left alone.
	// Code: Shards.AbortMove.
	AbortStampsSourceEpoch bool
	// RaiseFreezesUnowned: RaiseGeneration re-stamps only an active stamp
	// the root gives the cluster (map, move record of its epoch, or a later
	// epoch); any other active stamp (restored stale) is frozen. Off: every
	// active stamp is re-stamped active. Code: shardadmin.go,
	// Shards.RaiseGeneration.
	RaiseFreezesUnowned bool
	// RaiseStampsRootEpoch (NOT IN THE SPEC, proposed): when no move of the
	// slot is recorded at R, the re-stamp carries epoch max(stamp.move, R),
	// so that a call of any move that ended before R (a stalled P3 of an
	// aborted move) sees a later epoch and stops. Without it a restore
	// that undid an abort's A3 (which fences a late P3 with the move's
	// epoch) lets that P3 freeze the slot for good. Code: shardadmin.go,
	// Shards.RaiseGeneration.
	RaiseStampsRootEpoch bool
	// RaiseCAS: RaiseGeneration's re-stamp compares the stamp's mod
	// revision with the one it read. Off: a plain put. Code: shardadmin.go,
	// Shards.RaiseGeneration.
	RaiseCAS bool
}

// AllRules returns the rules with every one on: the spec.
func AllRules() Rules {
	r := Rules{}
	for _, sw := range Switches() {
		*sw.On(&r) = true
	}
	return r
}

// Switch is one rule of Rules: its name, the real code that enforces it,
// and its field.
type Switch struct {
	Name string
	Code string
	On   func(*Rules) *bool
}

// Switches lists every rule of Rules.
func Switches() []Switch {
	return []Switch{
		{"GuardRequiresActiveStamp", "slotguard.go queue.slotGuard, shardsession.go Session.route", func(r *Rules) *bool { return &r.GuardRequiresActiveStamp }},
		{"GuardComparesValue", "slotguard.go queue.slotGuard", func(r *Rules) *bool { return &r.GuardComparesValue }},
		{"ContactTargetFirst", "move.go mover.begin", func(r *Rules) *bool { return &r.ContactTargetFirst }},
		{"PrepareTarget", "move_phases.go mover.prepare", func(r *Rules) *bool { return &r.PrepareTarget }},
		{"StaleEpochStops", "move_phases.go mover.prepare, mover.freeze", func(r *Rules) *bool { return &r.StaleEpochStops }},
		{"DrainWaits", "move_phases.go mover.drain", func(r *Rules) *bool { return &r.DrainWaits }},
		{"ForceTailFirst", "move_phases.go mover.force", func(r *Rules) *bool { return &r.ForceTailFirst }},
		{"MemberWritesGuardedByEpoch", "move_phases.go mover.drain, mover.force, mover.copyCompletions, mover.dropCompletions", func(r *Rules) *bool { return &r.MemberWritesGuardedByEpoch }},
		{"MoverComparesValue", "move_phases.go mover.drain, mover.force, mover.copyCompletions, mover.activate, mover.dropCompletions (proposed)", func(r *Rules) *bool { return &r.MoverComparesValue }},
		{"ActivateRaisesGeneration", "move_phases.go mover.activate", func(r *Rules) *bool { return &r.ActivateRaisesGeneration }},
		{"ActivateCAS", "move_phases.go mover.activate", func(r *Rules) *bool { return &r.ActivateCAS }},
		{"SwitchMapChecksRecord", "move_phases.go mover.switchMap", func(r *Rules) *bool { return &r.SwitchMapChecksRecord }},
		{"AbortFencesTargetFirst", "Shards.AbortMove", func(r *Rules) *bool { return &r.AbortFencesTargetFirst }},
		{"AbortRefusesActiveTarget", "Shards.AbortMove", func(r *Rules) *bool { return &r.AbortRefusesActiveTarget }},
		{"AbortStampsSourceEpoch", "Shards.AbortMove", func(r *Rules) *bool { return &r.AbortStampsSourceEpoch }},
		{"RaiseFreezesUnowned", "shardadmin.go Shards.RaiseGeneration", func(r *Rules) *bool { return &r.RaiseFreezesUnowned }},
		{"RaiseStampsRootEpoch", "shardadmin.go Shards.RaiseGeneration (proposed)", func(r *Rules) *bool { return &r.RaiseStampsRootEpoch }},
		{"RaiseCAS", "shardadmin.go Shards.RaiseGeneration", func(r *Rules) *bool { return &r.RaiseCAS }},
	}
}
