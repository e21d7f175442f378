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
	// route.go, Session.route).
	GuardRequiresActiveStamp bool
	// GuardComparesValue: the guard compares the stamp's value as well as
	// its mod revision, so a stamp re-written at the same mod revision after
	// a restore (revisions went back) does not pass. Code: slotguard.go,
	// queue.slotGuard.
	GuardComparesValue bool
	// ContactTargetFirst (P0): the mover reads from the target before it
	// records anything; an unreachable target is an error with nothing
	// written. Code: shard/move.go, mover.begin (the contact before the record).
	ContactTargetFirst bool
	// PrepareTarget (P2): the target's stamp is written incoming with the
	// move's epoch before the source is frozen, and the copy (P5) and the
	// activation (P6) compare it. Off: they compare the target's stamp as
	// the mover first read it. Code: shard/move_stamps.go, mover.prepare.
	PrepareTarget bool
	// StaleEpochStops (P2, P3): a stamp of a later epoch, or of this epoch
	// in a state this phase does not expect, stops the mover. Off: only the
	// mod revision read is compared (first touch at any epoch). Code:
	// shard/move_stamps.go, mover.prepare and mover.freeze.
	StaleEpochStops bool
	// DrainWaits (P4): the mover goes on only once every key of the slot
	// read after the freeze is deleted. Code: shard/move_drain.go, mover.drain.
	DrainWaits bool
	// ForceTailFirst (P4, ForceAfter): force deletes a name's keys highest
	// create revision first, the holder's last, so no waiter is granted in
	// passing. Code: shard/move_drain.go, mover.force.
	ForceTailFirst bool
	// MemberWritesGuardedByEpoch (P4, P5, P8): the drain's read, each force
	// chunk, the read and the copy of completion records and their deletion
	// on the source compare the stamp this move wrote (frozenMod on the
	// source, incomingMod on the target). Code: shard/move_drain.go, mover.slotKeys
	// and mover.force; shard/move_records.go, mover.records, mover.copyCompletions
	// and mover.dropOnce.
	MemberWritesGuardedByEpoch bool
	// MoverComparesValue: every compare a mover makes on a member's stamp
	// it wrote or read (the CAS of each stamp write, frozenMod on the source,
	// incomingMod on the target: P2..P8 and force) compares the stamp's
	// value as well as its mod revision, as the client's guard does: after
	// a restore mod revisions repeat, and a stamp re-written at incomingMod
	// (a raise freezing it) would let a late P6 of an aborted move activate
	// the target. Code: shard/move_stamps.go, stampIs (in swapStamp and
	// mover.activate); shard/move_drain.go, mover.frozenCmp (mover.slotKeys,
	// mover.force and its stamp check); shard/move_records.go,
	// mover.copyCompletions and mover.dropOnce.
	MoverComparesValue bool
	// ActivateRaisesGeneration (P6): the target's generation is raised
	// above every generation the root records before it is activated. Code:
	// shard/move_stamps.go, mover.activate (raiseGeneration, shard/admin.go).
	ActivateRaisesGeneration bool
	// ActivateCAS (P6): the activation compares the target's stamp with
	// incomingMod. Off: a plain put. Code: shard/move_stamps.go, mover.activate.
	ActivateCAS bool
	// SwitchMapChecksRecord (P7): the map switch compares the move record's
	// mod revision with the one this move recorded. Code: shard/move_records.go,
	// mover.switchMap.
	SwitchMapChecksRecord bool
	// AbortFencesTargetFirst (A2 before A3): the target is fenced before the
	// source is unfrozen. Code: shard/move_abort.go, Shards.abortMove.
	AbortFencesTargetFirst bool
	// AbortRefusesActiveTarget (A2): an abort refuses a move whose target is
	// active with its epoch (resume it instead). Code: shard/move_abort.go,
	// mover.fenceTarget.
	AbortRefusesActiveTarget bool
	// AbortStampsSourceEpoch (A3): the source is re-stamped active with the
	// move's epoch even when it is active already (its freeze is still to
	// come), which fences a late P3. Off: an active source is left alone.
	// Code: shard/move_abort.go, mover.unfreeze.
	AbortStampsSourceEpoch bool
	// RaiseFreezesUnowned: RaiseGeneration re-stamps only an active stamp
	// the root gives the cluster (map, move record of its epoch, or a later
	// epoch); any other active stamp (restored stale) is frozen. Off: every
	// active stamp is re-stamped active. Code: shard/admin.go,
	// Shards.raiseGeneration and ownership.gives.
	RaiseFreezesUnowned bool
	// RaiseStampsRootEpoch: when no move of the slot is recorded at R, the
	// re-stamp (active or frozen) carries epoch max(stamp.move, R), so that
	// a call of any move that ended before R (a stalled P3 of an aborted
	// move) sees a later epoch and stops. Without it a restore that undid an
	// abort's A3 (which fences a late P3 with the move's epoch) lets that P3
	// freeze the slot for good. Code: shard/admin.go, Shards.raiseGeneration.
	RaiseStampsRootEpoch bool
	// RaiseRefusesDuringMove: while a move from the cluster is recorded at
	// R and its target's stamp is not active under the move's epoch, the
	// raise refuses (ErrMoveInProgress, nothing written): abort or resume
	// the move first. The source's stamp may then be the abort's (freezing
	// it strands the slot) or the move's (re-activating it makes two
	// holders). Past the activation the raise freezes the source's active
	// stamp (ownership.gives), and a mover whose target is active adopts a
	// source stamp that is not active by freezing it again under its epoch.
	// Code: shard/admin.go, Shards.movesAllowRaise.
	RaiseRefusesDuringMove bool
	// RaiseUnfreezesOwner: with no move of the
	// slot recorded at R and the map naming the cluster, RaiseGeneration
	// re-stamps a frozen stamp of epoch <= R active (epoch R, generation
	// g): only a move that ended before R froze it, a stalled P3 that
	// reached the restored member (which the operator opens to AbortMove
	// after a refused raise, and which no procedure keeps from a stalled
	// mover) before the raise; a failed CAS reads the stamp again (the
	// freeze may land between the raise's read and its CAS). Code: none yet; would be shard/admin.go,
	// Shards.raiseGeneration.
	RaiseUnfreezesOwner bool
	// RaiseCAS: RaiseGeneration's re-stamp compares the stamp's mod
	// revision with the one it read. Off: a plain put. Code: shard/admin.go,
	// Shards.raiseGeneration (swapStamp).
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
		{"GuardRequiresActiveStamp", "slotguard.go queue.slotGuard, route.go Session.route", func(r *Rules) *bool { return &r.GuardRequiresActiveStamp }},
		{"GuardComparesValue", "slotguard.go queue.slotGuard", func(r *Rules) *bool { return &r.GuardComparesValue }},
		{"ContactTargetFirst", "shard/move.go mover.begin", func(r *Rules) *bool { return &r.ContactTargetFirst }},
		{"PrepareTarget", "shard/move_stamps.go mover.prepare", func(r *Rules) *bool { return &r.PrepareTarget }},
		{"StaleEpochStops", "shard/move_stamps.go mover.prepare, mover.freeze", func(r *Rules) *bool { return &r.StaleEpochStops }},
		{"DrainWaits", "shard/move_drain.go mover.drain", func(r *Rules) *bool { return &r.DrainWaits }},
		{"ForceTailFirst", "shard/move_drain.go mover.force", func(r *Rules) *bool { return &r.ForceTailFirst }},
		{"MemberWritesGuardedByEpoch", "shard/move_drain.go mover.slotKeys, mover.force; shard/move_records.go mover.records, mover.copyCompletions, mover.dropOnce", func(r *Rules) *bool { return &r.MemberWritesGuardedByEpoch }},
		{"MoverComparesValue", "shard/move_stamps.go stampIs, swapStamp, mover.activate; shard/move_drain.go mover.frozenCmp, mover.force; shard/move_records.go mover.copyCompletions, mover.dropOnce", func(r *Rules) *bool { return &r.MoverComparesValue }},
		{"ActivateRaisesGeneration", "shard/move_stamps.go mover.activate", func(r *Rules) *bool { return &r.ActivateRaisesGeneration }},
		{"ActivateCAS", "shard/move_stamps.go mover.activate", func(r *Rules) *bool { return &r.ActivateCAS }},
		{"SwitchMapChecksRecord", "shard/move_records.go mover.switchMap", func(r *Rules) *bool { return &r.SwitchMapChecksRecord }},
		{"AbortFencesTargetFirst", "shard/move_abort.go Shards.abortMove", func(r *Rules) *bool { return &r.AbortFencesTargetFirst }},
		{"AbortRefusesActiveTarget", "shard/move_abort.go mover.fenceTarget", func(r *Rules) *bool { return &r.AbortRefusesActiveTarget }},
		{"AbortStampsSourceEpoch", "shard/move_abort.go mover.unfreeze", func(r *Rules) *bool { return &r.AbortStampsSourceEpoch }},
		{"RaiseFreezesUnowned", "shard/admin.go Shards.raiseGeneration, ownership.gives", func(r *Rules) *bool { return &r.RaiseFreezesUnowned }},
		{"RaiseStampsRootEpoch", "shard/admin.go Shards.raiseGeneration", func(r *Rules) *bool { return &r.RaiseStampsRootEpoch }},
		{"RaiseRefusesDuringMove", "shard/admin.go Shards.movesAllowRaise", func(r *Rules) *bool { return &r.RaiseRefusesDuringMove }},
		{"RaiseUnfreezesOwner", "shard/admin.go ownership.restamp, Shards.raiseGeneration", func(r *Rules) *bool { return &r.RaiseUnfreezesOwner }},
		{"RaiseCAS", "shard/admin.go ownership.restampAll (stepStampFrom)", func(r *Rules) *bool { return &r.RaiseCAS }},
	}
}
