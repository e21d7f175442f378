//go:build linux

package safety

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Run lengths. Short mode (the default, CI): 12 s per cell, 10 s per
// self-test. Long mode: ETCDLOCK_SAFETY_LONG=1 (60 s per cell) or
// ETCDLOCK_SAFETY_DURATION per cell (run with -timeout 0).
const (
	shortDuration    = 12 * time.Second
	longDuration     = 60 * time.Second
	selfTestDuration = 10 * time.Second
	sessionTTL       = 2 * time.Second // etcd's minimum with embedtest's 1 s election timeout
	// steadyWorkers of the workers are steady (see spawn), with sessions of
	// steadyTTL (the library's default): no worker fault touches them, and
	// their sessions outlive link holds and member crashes, long enough for
	// a write of unknown outcome of theirs to be delivered while they go on
	// locking.
	steadyWorkers = 2
	steadyTTL     = 10 * time.Second
	// steadyLife is the mean lifetime of a steady worker's session (each
	// between half and one and a half of it): long enough for a late write
	// to find the session still there, short enough that a key of it that
	// nobody holds does not block a long run's queue for good.
	steadyLife = time.Minute
	workers    = 4
)

// Minimums of a short run, by construction: each cell runs until it has
// them (the fault schedule keeps arming targeted pauses), so the cells
// together have well over the totals' minimums.
const (
	minAckedPerCell    = 34
	minExpiriesPerCell = 1
	minTotalAcked      = 100
	minTotalExpiries   = 5
	minCleanSelfTest   = 3
)

func safetyDuration(t *testing.T) time.Duration {
	v := os.Getenv("ETCDLOCK_SAFETY_DURATION")
	switch {
	case v == "" && os.Getenv("ETCDLOCK_SAFETY_LONG") != "":
		return longDuration
	case v == "":
		return shortDuration
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("ETCDLOCK_SAFETY_DURATION=%q: want a positive duration such as 60s", v)
	}
	return d
}

// safetySeed is ETCDLOCK_SAFETY_SEED, or the time: every run logs its seed,
// and the same seed replays the same fault schedule (not the same timing).
func safetySeed(t *testing.T) uint64 {
	if v := os.Getenv("ETCDLOCK_SAFETY_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ETCDLOCK_SAFETY_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}

// safetyCells are TestSafety's cells: the four workloads with the
// workers' writes sent through their client's group commit (the default),
// then each of them again with one request per write (WithoutBatching).
func safetyCells() []cellConfig {
	var cells []cellConfig
	for _, unbatched := range []bool{false, true} {
		for _, wl := range []struct{ name, role string }{
			{"fenced-register", roleRegister},
			{"guarded-etcd", roleEtcd},
			{"election", roleElection},
			{"read-write", roleRW},
		} {
			name := wl.name
			if unbatched {
				name += "-unbatched"
			}
			cells = append(cells, cellConfig{name: name, role: wl.role, mode: Fenced, unbatched: unbatched})
		}
	}
	return cells
}

// TestSafety runs every cell of safetyCells under a mixed fault schedule
// and requires every checker to pass.
func TestSafety(t *testing.T) {
	d := safetyDuration(t)
	seed := safetySeed(t)
	var total counts
	ran := 0
	cells := safetyCells()
	for i, cfg := range cells {
		t.Run(cfg.name, func(t *testing.T) {
			cfg.duration, cfg.workers, cfg.ttl, cfg.seed = d, workers, sessionTTL, seed+uint64(i)
			cfg.minAcked, cfg.minExpiries = minAckedPerCell, minExpiriesPerCell
			res := runCell(t, cfg)
			if !res.report.OK() {
				t.Errorf("safety violated: %s", res.report)
			}
			if res.report.Unbounded > 0 {
				t.Logf("%d grants had no revision probe after them (checked without an upper bound)", res.report.Unbounded)
			}
			// Every targeted pause whose lease expired and whose next holder
			// read before the victim wrote must end with the victim's write
			// refused: that is what fencing is for.
			for _, s := range res.scenarios {
				if s.expired && s.held && s.victimOutcome == "ok" {
					t.Errorf("stale write admitted: token %d wrote after its lease expired and token %d had read", s.victimToken, s.heldToken)
				}
			}
			total.add(res.n)
			ran++
		})
	}
	if ran == len(cells) {
		summarize(t, "safety totals: %s", total)
		if total.acked < minTotalAcked || total.pauseExpiries < minTotalExpiries {
			t.Errorf("totals below the minimums: %d acknowledged increments (want >= %d), %d lease expiries from pauses (want >= %d)",
				total.acked, minTotalAcked, total.pauseExpiries, minTotalExpiries)
		}
	}
}

// TestSelfTest runs the register workload against deliberately broken
// registers and requires the checkers to catch them, every run: each
// targeted pause stops a holder between its read and its write until its
// lease has expired and the next holder has read, so a register that lets
// the stopped holder's write through loses an increment.
func TestSelfTest(t *testing.T) {
	seed := safetySeed(t)
	for i, mode := range []Mode{Unfenced, FenceWritesOnly} {
		t.Run(mode.String(), func(t *testing.T) {
			res := runCell(t, cellConfig{name: "selftest-" + mode.String(), role: roleRegister, mode: mode,
				duration: selfTestDuration, workers: workers, ttl: sessionTTL, seed: seed + 100 + uint64(i),
				minClean: minCleanSelfTest, expectFail: true})
			r := res.report
			if r.OK() {
				t.Fatalf("the checkers passed a %s register: a checker that passes a broken system proves nothing", mode)
			}
			if r.Linearizability != porcupine.Illegal {
				t.Errorf("linearizability: %s, want %s", r.Linearizability, porcupine.Illegal)
			}
			for _, c := range []Checker{Increments, Tokens} {
				if !r.Failed(c) {
					t.Errorf("checker %s passed the %s register", c, mode)
				}
			}
			if r.Visualization == "" {
				t.Errorf("no visualization written")
			} else if fi, err := os.Stat(r.Visualization); err != nil || fi.Size() == 0 {
				t.Errorf("visualization %s: %v", r.Visualization, err)
			}
			clean := 0
			for _, s := range res.scenarios {
				if s.clean() {
					clean++
					if s.victimOutcome != "ok" {
						t.Errorf("the %s register refused a stale write (token %d)", mode, s.victimToken)
					}
				}
			}
			summarize(t, "safety %s: expected failure, caught: %d clean targeted pauses; %s", mode, clean, r.Verdict())
		})
	}
}
