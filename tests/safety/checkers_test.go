package safety

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/etcdlock/etcdlock"
)

// Checker names one of the checkers; the keys of Report.Violations.
type Checker string

// The checkers Check runs.
const (
	// Linearizability: the increments, read by porcupine as operations
	// on a counter whose every increment is an atomic compare-and-set from
	// the value read to that value + 1, are linearizable. Writes of unknown
	// outcome may or may not have taken effect (they never return).
	Linearizability Checker = "linearizability"
	// Increments: no acknowledged increment was lost or applied twice;
	// the final value is at least the number of acknowledged increments and
	// at most that plus the unknown ones; every admitted write wrote the
	// value it overwrote + 1.
	Increments Checker = "increments"
	// Tokens: the tokens the resource admitted never go down (they
	// increase at each change of holder), so no stale read or write was
	// admitted; every admitted token was reported granted, and admitted only
	// after its grant. For state in etcd, each write was applied while its
	// key was the lowest live key of the queue.
	Tokens Checker = "tokens"
	// Grants: every reported grant agrees with etcd's own record of the
	// queue: its key was the lowest live key at some revision between its
	// creation and the first revision probe issued after the grant returned.
	Grants Checker = "grants"
	// FIFO: waiters are granted in enqueue order; no key that reached
	// the front of the queue while its session lived on was passed over.
	FIFO Checker = "fifo"
	// Held: no grant was taken from a holder that still held it while its
	// session lived on: no reported grant's key was deleted, as the test
	// saw in etcd's record, before its holder began to release it, unless
	// the deletion went with its lease (a lease that created a later key
	// of the queue was alive). A key deleted under a live holder hands the
	// lock to the next waiter while the holder still acts on it: two
	// holders, which fencing hides from the other checkers. Nor was a
	// waiter's key deleted under it (its Lock failed with ErrLockLost)
	// while its session lived on (its lease was found alive after the
	// failure, or was granted later): the same delete, landing while the
	// key waited.
	Held Checker = "held"
	// Shared: with shared grants (RWMutex readers, admitted with
	// Fence.AdmitShared), no write was admitted with a token lower than a
	// shared read admitted before it (a stale writer after a newer
	// reader), and no shared read with a token lower than a write admitted
	// before it.
	Shared Checker = "shared"
)

// checkers lists every checker, in report order.
var checkers = []Checker{Linearizability, Increments, Tokens, Grants, FIFO, Held, Shared}

// maxMessages caps the messages kept per checker.
const maxMessages = 20

// Options tunes Check.
type Options struct {
	// Timeout bounds the linearizability search (0: none). A search that
	// times out makes the check fail as inconclusive.
	Timeout time.Duration
	// VisualizationPath, when not empty, is where porcupine's HTML
	// visualization is written if the history is not linearizable.
	VisualizationPath string
}

// Report is the verdict of Check.
type Report struct {
	// Linearizability is porcupine's result.
	Linearizability porcupine.CheckResult
	// Visualization is the path of the HTML visualization, if one was
	// written.
	Visualization string
	// Violations holds, per checker name, what it found (at most 20
	// messages each, then a count of the rest).
	Violations map[Checker][]string
	// Unbounded counts grants that had no revision probe after them: they
	// were checked without an upper bound on their deciding revision.
	Unbounded int
}

// OK reports whether every checker passed.
func (r *Report) OK() bool {
	return r.Linearizability == porcupine.Ok && len(r.Violations) == 0
}

// Failed reports whether the named checker found a violation.
func (r *Report) Failed(check Checker) bool {
	if check == Linearizability {
		return r.Linearizability != porcupine.Ok
	}
	return len(r.Violations[check]) > 0
}

// Verdict is "PASS", or "FAIL" and the checkers that failed.
func (r *Report) Verdict() string {
	if r.OK() {
		return "PASS"
	}
	var failed []string
	for _, c := range checkers {
		if r.Failed(c) {
			failed = append(failed, string(c))
		}
	}
	return "FAIL (" + strings.Join(failed, ", ") + ")"
}

// String lists the verdict and every violation.
func (r *Report) String() string {
	var b strings.Builder
	b.WriteString(r.Verdict())
	if r.Linearizability != porcupine.Ok {
		fmt.Fprintf(&b, "\n  %s: %s", Linearizability, r.Linearizability)
		if r.Visualization != "" {
			fmt.Fprintf(&b, " (visualization: %s)", r.Visualization)
		}
	}
	for _, c := range checkers {
		for _, m := range r.Violations[c] {
			fmt.Fprintf(&b, "\n  %s: %s", c, m)
		}
	}
	return b.String()
}

// violations collects the messages of one checker.
type violations struct {
	msgs []string
	n    int
}

func (v *violations) add(format string, args ...any) {
	v.n++
	if len(v.msgs) < maxMessages {
		v.msgs = append(v.msgs, fmt.Sprintf(format, args...))
	}
}

func (v *violations) list() []string {
	if v.n > len(v.msgs) {
		return append(v.msgs, fmt.Sprintf("... and %d more", v.n-len(v.msgs)))
	}
	return v.msgs
}

// Check runs every checker on h.
func Check(h *History, opts Options) *Report {
	r := &Report{Violations: map[Checker][]string{}}
	var err error
	r.Linearizability, r.Visualization, err = CheckLinearizable(h, opts)
	if err != nil {
		r.Violations[Linearizability] = []string{"visualization: " + err.Error()}
	}
	if r.Linearizability == porcupine.Unknown {
		r.Violations[Linearizability] = append(r.Violations[Linearizability],
			fmt.Sprintf("inconclusive: the search did not finish within %v", opts.Timeout))
	}
	var unbounded int
	results := map[Checker][]string{
		Increments: CheckIncrements(h),
		Tokens:     CheckTokens(h),
		Held:       CheckHeld(h),
		Shared:     CheckShared(h),
	}
	if !h.SharedGrants {
		// Their model of the queue is a Mutex's.
		results[Grants] = checkGrants(h, &unbounded)
		results[FIFO] = CheckFIFO(h)
	}
	for name, msgs := range results {
		if len(msgs) > 0 {
			r.Violations[name] = msgs
		}
	}
	r.Unbounded = unbounded
	return r
}

// CheckIncrements checks that no acknowledged increment was lost or
// applied twice (see Increments) and returns what it found.
func CheckIncrements(h *History) []string {
	var v violations
	t := tallyIncrements(h)
	bases := make([]int64, 0, len(t.byBase))
	for b := range t.byBase {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	for _, b := range bases {
		os := t.byBase[b]
		if len(os) > 1 {
			toks := make([]string, len(os))
			for i, o := range os {
				toks[i] = fmt.Sprintf("token %d (client %d)", o.Token, o.Client)
			}
			v.add("%d acknowledged increments from %d to %d (%s): all but one were lost",
				len(os), b, b+1, strings.Join(toks, ", "))
		}
		if b >= h.Final {
			v.add("acknowledged increment from %d to %d (token %d) is missing from the final value %d",
				b, b+1, os[0].Token, h.Final)
		}
	}
	t.checkFinal(&v, h.Final)
	for _, a := range h.Admissions {
		if a.Write && a.Admitted && a.Value != a.Prev+1 {
			v.add("admission %d: token %d wrote %d over %d (lost update at the resource)", a.Seq, a.Token, a.Value, a.Prev)
		}
	}
	return v.list()
}

// increments is a history's increments by outcome.
type increments struct {
	byBase      map[int64][]Op // acknowledged, by the value they read
	acked       int
	unknown     int
	unknownBase map[int64]bool // values read by increments of unknown outcome
}

func tallyIncrements(h *History) increments {
	t := increments{byBase: map[int64][]Op{}, unknownBase: map[int64]bool{}}
	for _, o := range h.Ops {
		switch o.Outcome {
		case Acked:
			t.acked++
			t.byBase[o.Value] = append(t.byBase[o.Value], o)
		case Unknown:
			t.unknown++
			t.unknownBase[o.Value] = true
		}
	}
	return t
}

// checkFinal checks the final value against the increments.
func (t increments) checkFinal(v *violations, final int64) {
	if final < int64(t.acked) {
		v.add("final value %d is below the %d acknowledged increments: increments were lost", final, t.acked)
	}
	if final > int64(t.acked+t.unknown) {
		v.add("final value %d is above %d acknowledged + %d unknown increments: something was applied twice",
			final, t.acked, t.unknown)
		return
	}
	for b := int64(0); b < final; b++ {
		if len(t.byBase[b]) == 0 && !t.unknownBase[b] {
			v.add("no increment read %d, yet the final value %d passed it", b, final)
		}
	}
}

// CheckTokens checks the resource's admissions (see Tokens) and
// returns what it found.
func CheckTokens(h *History) []string {
	c := tokenCheck{granted: map[etcdlock.Token]Grant{}, seen: map[etcdlock.Token]bool{}}
	for _, g := range h.Grants {
		if old, ok := c.granted[g.Token]; !ok || g.At < old.At {
			c.granted[g.Token] = g
		}
	}
	if h.AdmissionsAtRevisions {
		c.q = buildQueue(h)
	}
	adm := append([]Admission(nil), h.Admissions...)
	sort.SliceStable(adm, func(i, j int) bool { return adm[i].Seq < adm[j].Seq })
	for _, a := range adm {
		if a.Admitted {
			c.admitted(a)
		}
	}
	return c.v.list()
}

// tokenCheck is CheckTokens' state, as it walks the admissions in order.
type tokenCheck struct {
	v       violations
	granted map[etcdlock.Token]Grant // the first report of each grant
	q       *queueState              // nil unless admissions are at revisions
	highest etcdlock.Token           // of exclusive admissions so far
	seen    map[etcdlock.Token]bool  // tokens admitted so far
}

func (c *tokenCheck) admitted(a Admission) {
	what := "read"
	if a.Write {
		what = "write"
	}
	if a.Shared {
		// Shared reads hold at once and arrive in any order: Shared
		// checks them against the writes.
		what = "shared read"
	} else {
		if a.Token < c.highest {
			c.v.add("stale %s admitted: token %d at %d after token %d had been admitted", what, a.Token, a.Seq, c.highest)
		}
		c.highest = max(c.highest, a.Token)
	}
	g, ok := c.granted[a.Token]
	if !ok {
		c.v.add("%s admitted at %d with token %d, which no client reported granted", what, a.Seq, a.Token)
	} else if !c.seen[a.Token] && a.At != 0 && a.At < g.At-int64(time.Millisecond) {
		// A client stamps its grant right after Lock returns, so it may
		// stamp it a little after it used it only if it used it first:
		// allow for nothing but clock granularity.
		c.v.add("token %d admitted at %d, %v before its grant was reported", a.Token, a.Seq, time.Duration(g.At-a.At))
	}
	c.seen[a.Token] = true
	if c.q != nil && a.Write {
		// The guard was evaluated on the state just before the write.
		k := c.q.byCreate[int64(a.Token)]
		if k == nil || !k.lowestAt(a.Seq-1) {
			c.v.add("guarded write at revision %d with token %d, whose key was not the lowest live key at revision %d",
				a.Seq, a.Token, a.Seq-1)
		}
	}
}

// CheckShared checks the admissions of writes against those of shared
// reads (see Shared) and returns what it found.
func CheckShared(h *History) []string {
	var v violations
	adm := append([]Admission(nil), h.Admissions...)
	sort.SliceStable(adm, func(i, j int) bool { return adm[i].Seq < adm[j].Seq })
	var reader, writer etcdlock.Token // highest admitted so far
	var readerSeq int64
	for _, a := range adm {
		if !a.Admitted {
			continue
		}
		switch {
		case a.Shared:
			if a.Token < writer {
				v.add("stale shared read admitted: token %d at %d after write token %d had been admitted", a.Token, a.Seq, writer)
			}
			if a.Token > reader {
				reader, readerSeq = a.Token, a.Seq
			}
		case a.Write:
			if a.Token < reader {
				v.add("stale write admitted: token %d at %d after a shared read with the newer token %d had been admitted at %d",
					a.Token, a.Seq, reader, readerSeq)
			}
			writer = max(writer, a.Token)
		}
	}
	return v.list()
}
