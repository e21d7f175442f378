package shardmodel

import (
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// stateLimit bounds one exploration: past it a scenario is too wide for
// the tests, and Explore says so rather than cut the search silently.
const stateLimit = 40_000_000

func explore(t *testing.T, rules Rules, scn Scenario) Result {
	t.Helper()
	start := time.Now()
	res := New(rules, scn).Explore(stateLimit)
	t.Logf("%s: %d states, %d steps taken, depth %d, in %v", scn.Name, res.States, res.Transitions, res.Depth,
		time.Since(start).Round(time.Millisecond))
	return res
}

func logTrace(t *testing.T, res Result) {
	t.Helper()
	for i, l := range res.Trace {
		t.Logf("  %2d %s", i, l)
	}
}

func mustHold(t *testing.T, scn Scenario) {
	t.Helper()
	if res := explore(t, AllRules(), scn); res.Violation != "" {
		t.Errorf("%s breaks invariant %s", scn.Name, res.Violation)
		logTrace(t, res)
	}
}

// TestAllRulesHold explores every scenario with every rule on: no state
// breaks an invariant.
func TestAllRulesHold(t *testing.T) {
	for _, scn := range Scenarios() {
		t.Run(scn.Name, func(t *testing.T) {
			t.Parallel()
			mustHold(t, scn)
		})
	}
}

// needed names, for each rule, the scenario in which switching it off
// breaks an invariant.
var needed = []struct{ rule, scenario string }{
	{"GuardRequiresActiveStamp", "raise"},
	{"GuardComparesValue", "restore"},
	{"ContactTargetFirst", "dead"},
	{"PrepareTarget", "backforth"},
	{"StaleEpochStops", "backforth"},
	{"DrainWaits", "move"},
	{"ForceTailFirst", "move"},
	{"MemberWritesGuardedByEpoch", "backforth"},
	{"MoverComparesValue", "restoreback"},
	{"ActivateRaisesGeneration", "move"},
	{"ActivateCAS", "abort"},
	{"SwitchMapChecksRecord", "backforth"},
	{"AbortFencesTargetFirst", "abort"},
	{"AbortRefusesActiveTarget", "abort"},
	{"AbortStampsSourceEpoch", "abort"},
	{"RaiseFreezesUnowned", "restore"},
	{"RaiseStampsRootEpoch", "restore"},
	{"RaiseRefusesDuringMove", "restoremid-abort"},
	{"RaiseUnfreezesOwner", "restoremid-abort"},
	{"RaiseCAS", "raise"},
}

func switchNamed(t *testing.T, name string) Switch {
	t.Helper()
	for _, sw := range Switches() {
		if sw.Name == name {
			return sw
		}
	}
	t.Fatalf("no switch %s", name)
	return Switch{}
}

// TestEachRuleIsNeeded switches each rule off in turn: the explorer finds
// a violation, and logs a shortest trace to it.
func TestEachRuleIsNeeded(t *testing.T) {
	for _, tc := range needed {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			rules := AllRules()
			*switchNamed(t, tc.rule).On(&rules) = false
			res := explore(t, rules, ScenarioNamed(tc.scenario))
			if res.Violation == "" {
				t.Fatalf("with %s off, %s breaks no invariant", tc.rule, tc.scenario)
			}
			t.Logf("%s off breaks invariant %s in %d steps:", tc.rule, res.Violation, len(res.Trace)-1)
			logTrace(t, res)
		})
	}
}

// TestEverySwitchIsTested: each switch has one row in needed.
func TestEverySwitchIsTested(t *testing.T) {
	rows := map[string]int{}
	for _, tc := range needed {
		rows[tc.rule]++
	}
	for _, sw := range Switches() {
		if rows[sw.Name] != 1 {
			t.Errorf("switch %s has %d rows in needed, want 1", sw.Name, rows[sw.Name])
		}
		if !strings.Contains(sw.Code, ".go") && !strings.HasPrefix(sw.Code, "Shards.") {
			t.Errorf("switch %s names no code: %q", sw.Name, sw.Code)
		}
		delete(rows, sw.Name)
	}
	for name := range rows {
		t.Errorf("needed has a row for %s, which is no switch", name)
	}
}

// TestLargeScenarios explores the wider bounds (about a minute): set
// ETCDLOCK_SHARDMODEL_LARGE=1.
func TestLargeScenarios(t *testing.T) {
	if os.Getenv("ETCDLOCK_SHARDMODEL_LARGE") == "" {
		t.Skip("set ETCDLOCK_SHARDMODEL_LARGE=1 to explore the large scenarios")
	}
	for _, scn := range LargeScenarios() {
		t.Run(scn.Name, func(t *testing.T) { mustHold(t, scn) })
	}
}

// TestStateIsPlainBytes: Explore hashes a State as memory, which needs it
// to have no padding (every field a byte).
func TestStateIsPlainBytes(t *testing.T) {
	if a := unsafe.Alignof(State{}); a != 1 {
		t.Fatalf("State has alignment %d: a field is wider than a byte", a)
	}
}
