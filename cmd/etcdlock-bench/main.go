// Command etcdlock-bench measures etcdlock against etcd's own concurrency
// package and against the one-commit-per-grant floor, on an embedded etcd
// cluster it starts, interleaving the contestants on the same cluster.
//
//	go run ./cmd/etcdlock-bench                        # scenarios 1-3, 5, 6 with fsync off
//	go run ./cmd/etcdlock-bench -fsync -members 3      # the same with fsync on
//	go run ./cmd/etcdlock-bench -scenarios scale -sessions 50000 -locks 100000 -hold 60s
//	go run ./cmd/etcdlock-bench -json results.json     # also write the results as JSON
//	go run ./cmd/etcdlock-bench -scenarios serve -members 1   # etcdlock serve beside the library and v3lock
//
// Contestants:
//
//	limit     raw Put with the session's lease + Delete of a distinct key: the
//	          one-commit-per-grant floor
//	etcd      go.etcd.io/etcd/client/v3/concurrency.Mutex
//	etcdlock  etcdlock.Mutex
//
// The latency scenario adds limit@leader: limit's Put sent straight to the
// etcd leader (etcdlock sends its writes there; the balanced limit's Put
// reaches a follower two times in three, which forwards it).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

type options struct {
	members   int
	fsync     bool
	duration  time.Duration
	rounds    int
	scenarios string
	sessions  int
	locks     int
	hold      time.Duration
	ttl       time.Duration
	jsonPath  string
	cpuprof   string
	warmup    time.Duration
	only      string // contestants to run (comma list); empty: all
	workers   string // worker counts for uncontended and hot (comma list); empty: the defaults
	counted   []int  // workers, parsed by pick
	// etcdlockBin is the etcdlock command of the serve scenario; "": build it.
	etcdlockBin string
	// etcdProcess runs the members in a process of their own (members.go).
	etcdProcess bool
}

func main() {
	if arg := os.Getenv(membersEnv); arg != "" {
		os.Exit(runMembers(arg))
	}
	var o options
	flag.IntVar(&o.members, "members", 3, "etcd members (3 or 5)")
	flag.BoolVar(&o.fsync, "fsync", false, "fsync the members' WAL")
	flag.DurationVar(&o.duration, "duration", 4*time.Second, "time per contestant per cell (split over rounds)")
	flag.IntVar(&o.rounds, "rounds", 4, "rounds per cell; the contestants' order alternates between rounds")
	flag.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "untimed run of every contestant before each cell's rounds (connections, caches, the members' database growth)")
	flag.StringVar(&o.scenarios, "scenarios", "uncontended,hot,latency,dead,failover", "comma list of: uncontended, hot, latency, dead, failover, scale, tombstones, many, lockall, shards, serve")
	flag.IntVar(&o.sessions, "sessions", 50000, "scale: sessions kept alive")
	flag.IntVar(&o.locks, "locks", 100000, "scale: locks held at once")
	flag.DurationVar(&o.hold, "hold", 60*time.Second, "scale: how long to hold them")
	flag.DurationVar(&o.ttl, "ttl", 10*time.Second, "session TTL for the dead-client and scale scenarios")
	flag.StringVar(&o.jsonPath, "json", "", "also write the results to this JSON file")
	flag.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of the whole run (client and embedded servers) to this file")
	flag.StringVar(&o.only, "contestants", "", "comma list of contestants to run (limit, etcd, etcdlock, etcdlock-nobatch); default all, e.g. to profile one alone")
	flag.StringVar(&o.etcdlockBin, "etcdlock", "", "serve: the etcdlock command to run (default: built from ./cmd/etcdlock)")
	flag.StringVar(&o.workers, "workers", "", "comma list of worker counts for uncontended and hot, instead of 1,16,64,256 and 2,16,64")
	flag.BoolVar(&o.etcdProcess, "etcd-process", false, "run the members in a process of their own, as in a deployment (uncontended, hot and serve only)")
	flag.Parse()
	if err := (&o).pick(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdlock-bench:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "etcdlock-bench:", err)
		os.Exit(1)
	}
}

// Result is one row of the output.
type Result struct {
	Scenario   string  `json:"scenario"`
	Workers    int     `json:"workers,omitempty"`
	Contestant string  `json:"contestant"`
	Grants     int64   `json:"grants,omitempty"`
	PerSecond  float64 `json:"grants_per_second,omitempty"`
	P50ms      float64 `json:"p50_ms,omitempty"`
	P99ms      float64 `json:"p99_ms,omitempty"`
	Note       string  `json:"note,omitempty"`
}

type report struct {
	Machine string   `json:"machine"`
	Members int      `json:"members"`
	Fsync   bool     `json:"fsync"`
	Results []Result `json:"results"`
}

func run(o options) error {
	ctx := context.Background()
	if o.cpuprof != "" {
		f, err := os.Create(o.cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	c, rates, stop, err := startCluster(ctx, o)
	if err != nil {
		return err
	}
	defer stop()
	rep := report{Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
		Members: o.members, Fsync: o.fsync}
	fmt.Printf("etcdlock-bench: %d members, fsync %v, %s\n", o.members, o.fsync, rep.Machine)
	for _, sc := range strings.Split(o.scenarios, ",") {
		var rs []Result
		sc = strings.TrimSpace(sc)
		if c == nil && sc != "uncontended" && sc != "hot" && sc != "serve" {
			return fmt.Errorf("scenario %s needs the members in the bench's process (leave out -etcd-process)", sc)
		}
		switch sc {
		case "uncontended":
			for _, n := range o.counts([]int{1, 16, 64, 256}) {
				rs = append(rs, cell(ctx, rates, o, "uncontended", n, false)...)
			}
		case "hot":
			for _, n := range o.counts([]int{2, 16, 64}) {
				rs = append(rs, cell(ctx, rates, o, "hot", n, true)...)
			}
		case "latency":
			rs = latency(ctx, c, o)
		case "dead":
			rs = deadClient(ctx, c, o)
		case "failover":
			rs = failover(ctx, c, o)
		case "scale":
			rs = scale(ctx, c, o)
		case "tombstones":
			rs = tombstones(ctx, c, o)
		case "many":
			rs = many(ctx, c, o)
		case "lockall":
			rs = lockAllScenario(ctx, c, o)
		case "shards":
			rs = shardsScenario(ctx, o)
		case "serve":
			rs = serveScenario(ctx, rates, o)
		default:
			return fmt.Errorf("unknown scenario %q", sc)
		}
		printTable(rs)
		rep.Results = append(rep.Results, rs...)
	}
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// pick parses -workers and narrows contestants to -contestants.
func (o *options) pick() error {
	if o.workers != "" {
		for _, f := range strings.Split(o.workers, ",") {
			var n int
			if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 1 {
				return fmt.Errorf("bad -workers entry %q: want a positive count", f)
			}
			o.counted = append(o.counted, n)
		}
	}
	if o.only == "" {
		return nil
	}
	var keep []contestant
	for _, name := range strings.Split(o.only, ",") {
		found := false
		for _, c := range contestants {
			if c.name == strings.TrimSpace(name) {
				keep, found = append(keep, c), true
			}
		}
		if !found {
			return fmt.Errorf("unknown contestant %q (want limit, etcd or etcdlock)", name)
		}
	}
	contestants = keep
	return nil
}

// counts returns the -workers counts, or def.
func (o options) counts(def []int) []int {
	if o.counted != nil {
		return o.counted
	}
	return def
}

// worker does one grant and release; acquire's latency is recorded.
type worker interface {
	acquire(ctx context.Context) error
	release(ctx context.Context) error
}

// contestant makes workers for lock name; close releases what it opened.
type contestant struct {
	name  string
	setup func(ctx context.Context, cli *clientv3.Client) (newWorker func(lock string, id int) worker, close func(), err error)
}

// cpuOf reads, for a contestant that goes through a server process, that
// process's CPU time, so that a cell can report its CPU per grant.
var cpuOf = map[string]func() time.Duration{}

var contestants = []contestant{
	{"limit", func(ctx context.Context, cli *clientv3.Client) (func(string, int) worker, func(), error) {
		lease, err := cli.Grant(ctx, 10)
		if err != nil {
			return nil, nil, err
		}
		ka, err := cli.KeepAlive(context.Background(), lease.ID)
		if err != nil {
			return nil, nil, err
		}
		go func() {
			for range ka {
			}
		}()
		return func(lock string, id int) worker {
				return &limitWorker{kv: cli, lease: lease.ID, key: fmt.Sprintf("bench-limit/%s/%d", lock, id)}
			}, func() {
				_, _ = cli.Revoke(context.Background(), lease.ID)
			}, nil
	}},
	// etcd's and our contestants get a session per worker: a
	// concurrency.Mutex is owned by its session (workers sharing one would
	// share the key and all "hold" at once), and ours are measured alike.
	etcdContestant("etcd", func(s *concurrency.Session, lock string) worker {
		return &etcdWorker{m: concurrency.NewMutex(s, "/bench-etcd/"+lock)}
	}),
	ours("etcdlock"),
	ours("etcdlock-nobatch", etcdlock.WithoutBatching()),
}

// ours is our contestant, with opts on every session; it counts the batch
// sizes of its writes in batchStatsOf[name].
func ours(name string, opts ...etcdlock.SessionOption) contestant {
	stats := &batchStats{sizes: map[int]int64{}}
	batchStatsOf[name] = stats
	return oursWith(name, func(s *etcdlock.Session, lock string) worker {
		return &ourWorker{m: etcdlock.NewMutex(s, "bench/"+lock)}
	}, append(opts, etcdlock.WithObserver(stats))...)
}

// etcdContestant gives each worker a concurrency.Session of its own and the
// worker mk makes on it; close closes the sessions.
func etcdContestant(name string, mk func(s *concurrency.Session, lock string) worker) contestant {
	return contestant{name, func(ctx context.Context, cli *clientv3.Client) (func(string, int) worker, func(), error) {
		var mu sync.Mutex
		var sessions []*concurrency.Session
		return func(lock string, _ int) worker {
				s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
				if err != nil {
					return errWorker{err}
				}
				mu.Lock()
				sessions = append(sessions, s)
				mu.Unlock()
				return mk(s, lock)
			}, func() {
				for _, s := range sessions {
					_ = s.Close()
				}
			}, nil
	}}
}

// oursWith gives each worker an etcdlock session of its own (with opts) and
// the worker mk makes on it; close closes the sessions.
func oursWith(name string, mk func(s *etcdlock.Session, lock string) worker, opts ...etcdlock.SessionOption) contestant {
	return contestant{name, func(ctx context.Context, cli *clientv3.Client) (func(string, int) worker, func(), error) {
		var mu sync.Mutex
		var sessions []*etcdlock.Session
		return func(lock string, _ int) worker {
				s, err := etcdlock.NewSession(ctx, cli, opts...)
				if err != nil {
					return errWorker{err}
				}
				mu.Lock()
				sessions = append(sessions, s)
				mu.Unlock()
				return mk(s, lock)
			}, func() {
				for _, s := range sessions {
					_ = s.Close()
				}
			}, nil
	}}
}

// batchStatsOf holds each of our contestants' batch sizes.
var batchStatsOf = map[string]*batchStats{}

// batchStats is an Observer that counts the batch sizes of its sessions'
// writes (etcdlock.Observer.Batched).
type batchStats struct {
	etcdlock.NopObserver
	mu    sync.Mutex
	sizes map[int]int64 // batch size -> writes answered in a batch of that size
}

func (b *batchStats) Batched(n int) {
	b.mu.Lock()
	b.sizes[n]++
	b.mu.Unlock()
}

// take describes the sizes counted since the last take, and forgets them.
func (b *batchStats) take() string {
	b.mu.Lock()
	sizes := b.sizes
	b.sizes = map[int]int64{}
	b.mu.Unlock()
	var writes, commits float64
	keys := make([]int, 0, len(sizes))
	for n, w := range sizes {
		writes += float64(w)
		commits += float64(w) / float64(n)
		keys = append(keys, n)
	}
	if writes == 0 {
		return ""
	}
	sort.Ints(keys)
	p := func(q float64) int { // the size that the q-th fraction of writes went in
		var acc float64
		for _, n := range keys {
			acc += float64(sizes[n])
			if acc >= q*writes {
				return n
			}
		}
		return keys[len(keys)-1]
	}
	return fmt.Sprintf("writes/commit: mean %.1f, p50 %d, p99 %d, max %d", writes/commits, p(.5), p(.99), keys[len(keys)-1])
}

// leaderLimit is limit with its Put and Delete sent straight to the etcd
// leader's endpoint instead of the client's balanced connection.
var leaderLimit = contestant{"limit@leader", func(ctx context.Context, cli *clientv3.Client) (func(string, int) worker, func(), error) {
	var ep string
	for _, e := range cli.Endpoints() {
		st, err := cli.Status(ctx, e)
		if err == nil && st.Leader == st.Header.MemberId {
			ep = e
		}
	}
	if ep == "" {
		return nil, nil, errors.New("no leader found")
	}
	conn, err := cli.Dial(ep)
	if err != nil {
		return nil, nil, err
	}
	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	kv := clientv3.NewKVFromKVClient(pb.NewKVClient(conn), cli)
	return func(lock string, id int) worker {
			return &limitWorker{kv: kv, lease: lease.ID, key: fmt.Sprintf("bench-limit/%s/%d", lock, id)}
		}, func() {
			_, _ = cli.Revoke(context.Background(), lease.ID)
			conn.Close()
		}, nil
}}

type errWorker struct{ err error }

func (w errWorker) acquire(context.Context) error { return w.err }
func (w errWorker) release(context.Context) error { return w.err }

type limitWorker struct {
	kv    clientv3.KV
	lease clientv3.LeaseID
	key   string
}

func (w *limitWorker) acquire(ctx context.Context) error {
	_, err := w.kv.Put(ctx, w.key, "x", clientv3.WithLease(w.lease))
	return err
}
func (w *limitWorker) release(ctx context.Context) error {
	_, err := w.kv.Delete(ctx, w.key)
	return err
}

type etcdWorker struct{ m *concurrency.Mutex }

func (w *etcdWorker) acquire(ctx context.Context) error { return w.m.Lock(ctx) }
func (w *etcdWorker) release(ctx context.Context) error { return w.m.Unlock(ctx) }

type ourWorker struct {
	m *etcdlock.Mutex
	l *etcdlock.Lock
}

func (w *ourWorker) acquire(ctx context.Context) (err error) {
	w.l, err = w.m.Lock(ctx)
	return err
}
func (w *ourWorker) release(ctx context.Context) error { return w.l.Unlock(ctx) }

// cell runs one scenario cell for every contestant, rounds times, each for
// duration/rounds, alternating the contestants' order.
func cell(ctx context.Context, c etcdCluster, o options, scenario string, n int, hot bool) []Result {
	type acc struct {
		grants int64
		took   time.Duration
		lat    []time.Duration
		cpu    time.Duration
	}
	accs := make([]acc, len(contestants))
	if o.warmup > 0 {
		for _, ct := range contestants {
			if _, _, _, err := runWorkers(ctx, c, ct, n, hot, o.warmup, fmt.Sprintf("%s-%d-warmup", scenario, n)); err != nil {
				fmt.Fprintf(os.Stderr, "%s %s n=%d warm-up: %v\n", scenario, ct.name, n, err)
			}
		}
	}
	for _, st := range batchStatsOf {
		st.take() // not the warm-up's
	}
	per := o.duration / time.Duration(o.rounds)
	for r := 0; r < o.rounds; r++ {
		for k := range contestants {
			i := k
			if r%2 == 1 {
				i = len(contestants) - 1 - k
			}
			var cpu0 time.Duration
			cpu := cpuOf[contestants[i].name]
			if cpu != nil {
				cpu0 = cpu()
			}
			g, took, lat, err := runWorkers(ctx, c, contestants[i], n, hot, per, fmt.Sprintf("%s-%d-r%d", scenario, n, r))
			if cpu != nil {
				accs[i].cpu += cpu() - cpu0
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s %s n=%d: %v\n", scenario, contestants[i].name, n, err)
			}
			accs[i].grants += g
			accs[i].took += took
			accs[i].lat = append(accs[i].lat, lat...)
		}
	}
	var out []Result
	for i, a := range accs {
		r := Result{Scenario: scenario, Workers: n, Contestant: contestants[i].name, Grants: a.grants,
			PerSecond: float64(a.grants) / a.took.Seconds(), P50ms: pct(a.lat, 50), P99ms: pct(a.lat, 99)}
		if st := batchStatsOf[r.Contestant]; st != nil {
			r.Note = st.take()
		}
		if a.cpu > 0 && a.grants > 0 {
			r.Note = fmt.Sprintf("server CPU %.0f µs/grant", float64(a.cpu.Microseconds())/float64(a.grants))
		}
		out = append(out, r)
	}
	return out
}

func runWorkers(ctx context.Context, c etcdCluster, ct contestant, n int, hot bool, d time.Duration, tag string) (int64, time.Duration, []time.Duration, error) {
	cli, err := c.Client()
	if err != nil {
		return 0, 0, nil, err
	}
	defer cli.Close()
	newWorker, closeFn, err := ct.setup(ctx, cli)
	if err != nil {
		return 0, 0, nil, err
	}
	defer closeFn()
	// Every worker (and its session) is made before the clock starts, and
	// all start together: a session's setup is not part of a grant's cost.
	workers := make([]worker, n)
	for i := range workers {
		lock := fmt.Sprintf("%s/%d", tag, i)
		if hot {
			lock = tag
		}
		workers[i] = newWorker(lock, i)
	}
	return drive(ctx, workers, d)
}

// drive runs every worker's grant-and-release loop for d, all started
// together, and returns the grants, the time taken, each grant's latency,
// and the errors.
func drive(ctx context.Context, workers []worker, d time.Duration) (int64, time.Duration, []time.Duration, error) {
	var grants atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for wctx.Err() == nil {
				t0 := time.Now()
				if err := w.acquire(wctx); err != nil {
					// A request in flight at the round's end can fail on the
					// server ("request timed out": the deadline travels with
					// it) a moment before wctx ends here: not an error.
					if dl, _ := wctx.Deadline(); wctx.Err() == nil && time.Until(dl) > 100*time.Millisecond {
						mu.Lock()
						firstErr = errors.Join(firstErr, err)
						mu.Unlock()
					}
					break
				}
				mine = append(mine, time.Since(t0))
				grants.Add(1)
				if err := w.release(context.Background()); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					break
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return grants.Load(), time.Since(start), lat, firstErr
}

func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s) - 1) * p / 100
	return float64(s[i].Microseconds()) / 1000
}

// latency measures the grant latency of a free lock (one worker, its own
// lock), for every contestant: for limit that is one Put.
func latency(ctx context.Context, c *embedtest.Cluster, o options) []Result {
	saved := contestants
	defer func() { contestants = saved }()
	for _, ct := range saved {
		if ct.name == "limit" {
			// etcdlock sends its writes to the leader; so does this row, to
			// show what the balanced limit's forwarding hop costs.
			contestants = append(append([]contestant(nil), saved...), leaderLimit)
		}
	}
	rs := cell(ctx, c, o, "latency", 1, false)
	for i := range rs {
		rs[i].Note = "p50/p99 of the grant alone"
	}
	return rs
}

func printTable(rs []Result) {
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tworkers\tcontestant\tgrants/s\tp50 ms\tp99 ms\tvs etcd\tvs limit\tnote\t")
	base := map[string]map[int]float64{}
	for _, r := range rs {
		if base[r.Contestant] == nil {
			base[r.Contestant] = map[int]float64{}
		}
		base[r.Contestant][r.Workers] = r.PerSecond
	}
	for _, r := range rs {
		ratio := func(other string) string {
			b := base[other][r.Workers]
			if b == 0 || r.PerSecond == 0 || r.Contestant == other {
				return ""
			}
			return fmt.Sprintf("%.2fx", r.PerSecond/b)
		}
		ps, p50, p99 := "", "", ""
		if r.PerSecond > 0 {
			ps = fmt.Sprintf("%.0f", r.PerSecond)
		}
		if r.P50ms > 0 {
			p50, p99 = fmt.Sprintf("%.2f", r.P50ms), fmt.Sprintf("%.2f", r.P99ms)
		}
		workers := ""
		if r.Workers > 0 {
			workers = fmt.Sprint(r.Workers)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, workers, r.Contestant, ps, p50, p99, ratio("etcd"), ratio("limit"), r.Note)
	}
	tw.Flush()
	fmt.Println()
}
