// Package shardmodel is an exhaustive model checker of etcdlock's slot-move
// protocol (the spec with epochs: MoveSlot P0..P8, AbortMove A1..A4,
// RaiseGeneration, the sharded session's slot guard), in Go tests, with no
// cluster. DESIGN.md ("Checking the move exhaustively") says what it covers, what it does not, and maps each
// rule to the code.
//
// The model has one slot and one name, on 2 or 3 member clusters and a
// root. Each member holds the slot's stamp (state, generation, move epoch,
// mod revision), its generation key, the name's queue keys (create
// revision, client, generation: the token is (generation, revision)) and
// its completion record, and counts its own revisions; the root holds the
// map, each cluster's recorded generation, the move record (its create
// revision is the epoch) and counts the root's revisions. Each etcd Txn is
// one atomic step. The actors are step machines: movers (a Resume caller of
// the same move among them; any may stall between two steps and take its
// next step after any others, or never), an abort, a RaiseGeneration with
// an optional restore before it, and clients (a stale map, cached stamps;
// a request in flight is the client's next step, which may come after any
// others or never).
//
// Explore visits every interleaving breadth first, with a set of the
// states seen, and checks in every state: (1) at most one holder, (2)
// tokens of successive grants strictly grow, (3) a run id once done never
// runs again, (4) at the end no slot is stranded, (5) no grant in passing
// during a force. Rules (the spec's rules, each a switch) are all on in
// TestAllRulesHold; TestEachRuleIsNeeded switches each off in turn and
// finds a violation, logging a shortest trace.
//
// Bounds (Scenarios; every run explores them all, about 1 million
// distinct states and 3 million steps, 4 s of CPU without the race
// detector and 13 s with it):
//
//   - move: 2 clusters; one move with ForceAfter and a Resume of it; 2
//     clients with 1 acquisition each;
//   - backforth: 2 clusters; a move C0 to C1, a move back, a Resume of the
//     first; 1 client with 2 acquisitions;
//   - chain3: 3 clusters; C0 to C1, C1 to C2, a Resume of the first; 1
//     client with 2 acquisitions;
//   - abort: 2 clusters; one move, a Resume of it, an abort; 2 clients;
//   - restore: 2 clusters; one move, an abort, a restore of C0 (to its
//     state before any move, while no move is recorded) and its
//     RaiseGeneration; 2 clients;
//   - restoreback: the slot moved C0 to C1 before; a move back, an abort,
//     a restore of C0 and its RaiseGeneration; 2 clients;
//   - restoremid, restoremid-abort: 2 clusters; one move (and an abort), a
//     restore of C0 at any point, also while the move is recorded, and its
//     RaiseGeneration; 2 clients;
//   - raise: 2 clusters; one move and a RaiseGeneration of its source; 2
//     clients;
//   - dead: 3 clusters, C2 unreachable; a move to C2, a move to C1, an
//     abort; 1 client.
//
// LargeScenarios widen them (three moves with a force and two clients, an
// abort among three moves, ...: 22 million states, 48 s of CPU without the
// race detector): set ETCDLOCK_SHARDMODEL_LARGE=1.
package shardmodel
