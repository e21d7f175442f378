// Command tour shows every promise of etcdlock working, as a timeline, on an
// etcd cluster that it starts in this process (nothing to install or set up):
//
//  1. Three workers race for one lock; the winner runs the job, the others
//     wait in FIFO order (Describe shows the queue).
//  2. The holder freezes for longer than its TTL; the next worker gets the
//     lock with a larger fencing token; the frozen worker wakes up and its
//     write is rejected by a fenced store as stale.
//  3. A minority of the etcd members crash; locks are still granted.
//  4. The etcd leader crashes; grants pause for an election and continue.
//  5. Three replicas elect a leader with Election.Run; the leader crashes and
//     another takes over; an observer prints every change.
//  6. A summary: grants, tokens, stale writes rejected, how fast the lock of
//     a dead holder frees.
//
// Each line of the timeline reads: time since the start, actor, fencing
// token ("-" when none), what happened. The tour exits with status 1 if any
// promise was broken, so it doubles as a smoke test.
//
//	go run ./examples/tour [--members 5] [--ttl 3s] [--quiet] [--ui 127.0.0.1:8080]
//
// With --ui, etcdlock's status page (etcdlock ui) of the tour's cluster is
// served on that address while the tour runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/examples/fenced-store/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// config holds the tour's flags.
type config struct {
	members int              // etcd members, at least 3
	ttl     time.Duration    // session TTL, whole seconds, at least 2s
	quiet   bool             // print only the summary
	ui      string           // serve the status page on this address ("": none)
	onUI    func(url string) // tests: told the page's URL
}

func main() {
	cfg := config{}
	flag.IntVar(&cfg.members, "members", 5, "number of etcd members to start (at least 3)")
	flag.DurationVar(&cfg.ttl, "ttl", 3*time.Second, "session TTL: whole seconds, 2s to 30s")
	flag.BoolVar(&cfg.quiet, "quiet", false, "print only the summary")
	flag.StringVar(&cfg.ui, "ui", "", "serve etcdlock's live status page on this address while the tour runs (e.g. 127.0.0.1:8080)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "tour: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "tour:", err)
		os.Exit(2)
	}
	// Ctrl-C (or SIGTERM) ends the tour at once: run's defers stop every
	// session and the in-process cluster (and remove its data) first.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg, os.Stdout)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case interrupted:
		fmt.Fprintln(os.Stderr, "tour: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "tour:", err)
		os.Exit(1)
	}
}

// validate checks the flags.
func (cfg config) validate() error {
	if cfg.members < 3 {
		return fmt.Errorf("--members %d: need at least 3 (a cluster that can lose a member)", cfg.members)
	}
	if cfg.ttl < 2*time.Second || cfg.ttl > 30*time.Second || cfg.ttl%time.Second != 0 {
		// etcd refuses a TTL below 2s with the 1s election timeout of the
		// embedded cluster; the tour's bounds are made for short TTLs.
		return fmt.Errorf("--ttl %v: want whole seconds from 2s to 30s", cfg.ttl)
	}
	return nil
}

// errBroken is returned by run when a promise was broken.
var errBroken = errors.New("promise broken")

// run runs the whole tour, printing to out. It returns an error wrapping
// errBroken when a promise was broken, and another error when the tour could
// not run.
func run(ctx context.Context, cfg config, out io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute+12*cfg.ttl)
	defer cancel()

	t := &tour{cfg: cfg, out: out, tl: out, start: time.Now(), tokens: make(map[string][]etcdlock.Token)}
	if cfg.quiet {
		t.tl = io.Discard
	}
	err := t.run(ctx)
	t.summary(err)
	return t.verdict(err)
}

// verdict returns the tour's result: an error wrapping errBroken when a
// promise was broken, runErr when the tour could not finish, else nil.
func (t *tour) verdict(runErr error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.broken) > 0 {
		return fmt.Errorf("%w: %s", errBroken, strings.Join(t.broken, "; "))
	}
	return runErr
}

// tour is the state of one run: the cluster, the fenced store, the timeline
// and the measurements the summary reports.
type tour struct {
	cfg   config
	out   io.Writer // summary
	tl    io.Writer // timeline (io.Discard with --quiet)
	start time.Time

	cluster *embedtest.Cluster
	store   *store.Client
	n       int // members

	mu            sync.Mutex // guards everything below and the writers
	tokens        map[string][]etcdlock.Token
	grants        int // mutex grants
	terms         int // leadership terms
	rejected      int // stale writes rejected by the store
	admitted      int // writes admitted by the store
	staleAdmitted int // stale writes the store admitted (a broken promise)
	broken        []string

	// Measurements for the summary; zero when the step did not get there.
	pausedFree   time.Duration // a frozen holder's lock: freeze to next grant
	crashedFree  time.Duration // a crashed leader: crash to next term
	handover     time.Duration // a resigned leader: resign to next term
	degraded     int           // grants with a minority of members down
	degradedSlow time.Duration // the slowest of them
	leaderGap    time.Duration // the largest gap between grants around the etcd leader's crash
	normalGap    time.Duration // the median gap between grants in that loop
	afterKill    int           // grants after the etcd leader's crash
	etcdElection time.Duration // crash of the etcd leader to a new etcd leader
	sessionsLost int           // sessions lost by their validity clock during etcd's election
}

// say prints one timeline line: time, actor, token, what happened.
func (t *tour) say(actor string, tok etcdlock.Token, format string, args ...any) {
	ts := "-"
	if tok > 0 {
		ts = tok.String()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.tl, "%+6.1fs  %-9s %5s  %s\n", time.Since(t.start).Seconds(), actor, ts, fmt.Sprintf(format, args...))
}

// step prints the heading of a step of the story.
func (t *tour) step(n int, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.tl, "\n== %d. %s\n", n, fmt.Sprintf(format, args...))
}

// fail records a broken promise, prints it, and returns an error wrapping
// errBroken for the steps that cannot go on.
func (t *tour) fail(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	t.mu.Lock()
	t.broken = append(t.broken, msg)
	t.mu.Unlock()
	t.say("BROKEN", 0, "%s", msg)
	return fmt.Errorf("%w: %s", errBroken, msg)
}

// granted records a grant (or a term of leadership) of name and checks that
// its token is larger than every earlier token of name.
func (t *tour) granted(name string, tok etcdlock.Token, term bool) {
	t.mu.Lock()
	prev := t.tokens[name]
	t.tokens[name] = append(prev, tok)
	if term {
		t.terms++
	} else {
		t.grants++
	}
	t.mu.Unlock()
	if n := len(prev); n > 0 && tok <= prev[n-1] {
		_ = t.fail("token %d of %q is not larger than the previous grant's %d", tok, name, prev[n-1])
	}
}

// expectation says what a write to the fenced store must do.
type expectation int

const (
	mustAdmit  expectation = iota // the writer holds the newest grant
	mustReject                    // a newer grant has written
)

// write sends value to the fenced store under key with tok, prints the
// outcome and checks it against want.
func (t *tour) write(ctx context.Context, actor, key string, tok etcdlock.Token, value string, want expectation) error {
	admitted, err := t.tryWrite(ctx, actor, key, tok, value)
	switch {
	case err != nil:
		return err
	case admitted && want == mustReject:
		t.mu.Lock()
		t.staleAdmitted++
		t.mu.Unlock()
		return t.fail("the store admitted a stale write (token %d to %q)", tok, key)
	case !admitted && want == mustAdmit:
		return t.fail("the store rejected the write of the newest holder (token %d to %q)", tok, key)
	}
	return nil
}

// tryWrite sends value to the fenced store under key with tok and prints
// the outcome: admitted, or rejected as stale (then err is nil).
func (t *tour) tryWrite(ctx context.Context, actor, key string, tok etcdlock.Token, value string) (admitted bool, err error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = t.store.Put(wctx, key, []byte(value), tok)
	switch {
	case err == nil:
		t.mu.Lock()
		t.admitted++
		t.mu.Unlock()
		t.say(actor, tok, "store: write %q admitted", value)
		return true, nil
	case errors.Is(err, etcdlock.ErrStaleToken):
		t.mu.Lock()
		t.rejected++
		t.mu.Unlock()
		t.say(actor, tok, "store: write %q REJECTED (409 Conflict): the store has admitted a newer token", value)
		return false, nil
	default:
		return false, fmt.Errorf("write to the store: %w", err)
	}
}

// worker is one process of the story: its own client and session.
type worker struct {
	name string
	cli  *clientv3.Client
	link *embedtest.Link // nil unless made with flaky
	s    *etcdlock.Session
}

// newWorker connects a worker with a session of the tour's TTL. A flaky
// worker reaches the cluster through a Link the tour can cut.
func (t *tour) newWorker(ctx context.Context, name string, flaky bool) (*worker, error) {
	w := &worker{name: name}
	var err error
	if flaky {
		w.cli, w.link, err = t.cluster.FlakyClient()
	} else {
		w.cli, err = t.cluster.Client()
	}
	if err != nil {
		return nil, err
	}
	w.s, err = t.newSession(ctx, w)
	if err != nil {
		_ = w.cli.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return w, nil
}

func (t *tour) newSession(ctx context.Context, w *worker) (*etcdlock.Session, error) {
	return etcdlock.NewSession(ctx, w.cli, etcdlock.WithTTL(t.cfg.ttl), etcdlock.WithIdentity(w.name))
}

// close ends the worker's session and client.
func (w *worker) close() {
	_ = w.s.Close()
	_ = w.cli.Close()
}

// describe prints who holds and who waits for name, and returns the
// waiters' identities in queue order.
func (t *tour) describe(ctx context.Context, cli *clientv3.Client, name string) ([]string, error) {
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil {
		return nil, err
	}
	if st.Holder == nil {
		t.say("Describe", 0, "%s is free", name)
		return nil, nil
	}
	for _, h := range st.Holders {
		t.say("Describe", h.Token, "%s: holder    %s (lease %x)", name, h.Identity, int64(h.Lease))
	}
	var ids []string
	for i, w := range st.Waiters {
		t.say("Describe", w.Token, "%s: waiter %d  %s (lease %x)", name, i+1, w.Identity, int64(w.Lease))
		ids = append(ids, w.Identity)
	}
	return ids, nil
}

// summary prints the measurements and the verdict.
func (t *tour) summary(runErr error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := func(label, format string, args ...any) {
		fmt.Fprintf(t.out, "  %-26s %s\n", label, fmt.Sprintf(format, args...))
	}
	secs := func(d time.Duration) string {
		if d == 0 {
			return "(not measured)"
		}
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	fmt.Fprintf(t.out, "\n== 6. Summary (%d etcd members, session TTL %v)\n", t.n, t.cfg.ttl)
	p("grants", "%d lock grants, %d leadership terms", t.grants, t.terms)
	names := make([]string, 0, len(t.tokens))
	for name := range t.tokens {
		names = append(names, name)
	}
	slices.Sort(names)
	increasing := true
	var per []string
	for _, name := range names {
		toks := t.tokens[name]
		for i := 1; i < len(toks); i++ {
			if toks[i] <= toks[i-1] {
				increasing = false
			}
		}
		per = append(per, fmt.Sprintf("%s %s", name, tokenRange(toks)))
	}
	verdict := "strictly increasing per name"
	if !increasing {
		verdict = "NOT increasing"
	}
	p("fencing tokens", "%s: %s", verdict, strings.Join(per, ", "))
	p("stale writes", "%d rejected, %d admitted (and %d current writes admitted)", t.rejected, t.staleAdmitted, t.admitted)
	p("a dead holder's lock", "free %s after its holder froze; a crashed leader replaced after %s (TTL %v)",
		secs(t.pausedFree), secs(t.crashedFree), t.cfg.ttl)
	p("a resigning leader", "replaced after %s (no TTL wait)", ms(t.handover))
	p(fmt.Sprintf("%d of %d members down", (t.n-1)/2, t.n), "%d grants, the slowest in %s", t.degraded, ms(t.degradedSlow))
	p("etcd leader crashed", "new etcd leader after %s; grants paused %s (normally every %s), %d grants after",
		secs(t.etcdElection), secs(t.leaderGap), ms(t.normalGap), t.afterKill)
	if t.sessionsLost > 0 {
		p("", "%d session(s) lost by their own conservative clock during that election, replaced", t.sessionsLost)
	}
	fmt.Fprintf(t.out, "  %-26s %.1fs\n", "runtime", time.Since(t.start).Seconds())
	switch {
	case len(t.broken) > 0:
		fmt.Fprintf(t.out, "\nBROKEN: %d promise(s):\n", len(t.broken))
		for _, b := range t.broken {
			fmt.Fprintf(t.out, "  - %s\n", b)
		}
	case runErr != nil:
		fmt.Fprintf(t.out, "\nThe tour could not finish: %v\n", runErr)
	default:
		fmt.Fprintln(t.out, "\nEvery promise held.")
	}
}

func ms(d time.Duration) string {
	if d == 0 {
		return "(not measured)"
	}
	return fmt.Sprintf("%dms", max(1, d.Milliseconds()))
}

// tokenRange prints a list of tokens compactly: "14 < 15 < 16", or
// "40 < ... < 97 (31 grants)" when long.
func tokenRange(toks []etcdlock.Token) string {
	if len(toks) <= 4 {
		s := make([]string, len(toks))
		for i, tok := range toks {
			s[i] = tok.String()
		}
		return strings.Join(s, " < ")
	}
	return fmt.Sprintf("%d < ... < %d (%d)", toks[0], toks[len(toks)-1], len(toks))
}
