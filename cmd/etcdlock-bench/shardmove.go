package main

// The shards scenario's move rows: what a move of one slot costs with
// 0 and with 200,000 queue keys of other slots on the source. The mover
// runs in a child process of its own (shardmover.go), so that its heap and
// the answers it receives are its own, not the embedded members'.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/shard"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// moveOthers is the number of other slots' keys of the loaded case.
const moveOthers = 200_000

// moveNames is the number of the moved slot's names, each held by one
// session and waited for by two.
const moveNames = 3

// moveRun is one move, as the parent saw it and the mover reported it.
type moveRun struct {
	frozen time.Duration // from the "frozen" phase to "activated"
	late   time.Duration // from "frozen" to the grant of a lock asked then
	res    moverResult
}

func moveCost(ctx context.Context, o options, others int) Result {
	r := Result{Scenario: "shards move", Contestant: fmt.Sprintf("%d other keys", others)}
	d, err := startDeployment(ctx, o, 2)
	if err != nil {
		r.Note = "error: " + err.Error()
		return r
	}
	defer d.close()
	rounds := max(o.rounds, 1)
	slots := d.shards.Slots("c0")[:rounds]
	if err := fillOthers(ctx, d.clients["c0"], slots, others); err != nil {
		r.Note = "error: " + err.Error()
		return r
	}
	old := oldReads(ctx, d.clients["c0"])
	var runs []moveRun
	for _, slot := range slots {
		run, err := moveOnce(ctx, d, slot)
		if err != nil {
			r.Note = "error: " + err.Error()
			return r
		}
		runs = append(runs, run)
	}
	r.Note = moveNote(runs) + "; " + old
	return r
}

// moveNote sums the runs up: medians, and the largest answer and heap.
func moveNote(runs []moveRun) string {
	var frozen, late, took []time.Duration
	var allocs []uint64
	var maxResp int
	var maxHeap, maxLive uint64
	method := ""
	for _, m := range runs {
		frozen, late = append(frozen, m.frozen), append(late, m.late)
		took, allocs = append(took, time.Duration(m.res.Took)), append(allocs, m.res.Allocated)
		if m.res.MaxResp > maxResp {
			maxResp, method = m.res.MaxResp, m.res.MaxMethod
		}
		maxHeap, maxLive = max(maxHeap, m.res.PeakHeap), max(maxLive, m.res.PeakLive)
	}
	return fmt.Sprintf("%d moves: frozen->activated median %v (max %v), lock asked at freeze granted after %v, "+
		"whole move %v (medians); mover: largest answer %s (%s), live heap peak above base %s, "+
		"heap peak with garbage %s (max of the moves), allocated %s (median)",
		len(runs), ms(median(frozen)), ms(slices.Max(frozen)), ms(median(late)), ms(median(took)),
		sizeOf(uint64(maxResp)), method, sizeOf(maxLive), sizeOf(maxHeap), sizeOf(median(allocs)))
}

func median[T int64 | uint64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func sizeOf(b uint64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// fillOthers writes n queue keys, one per name, of names whose slot is
// none of slots, under one lease, 128 Puts a Txn (etcd's default limit).
func fillOthers(ctx context.Context, cli *clientv3.Client, slots []int, n int) error {
	if n == 0 {
		return nil
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		return err
	}
	var keys []string
	for i := 0; len(keys) < n; i++ {
		name := fmt.Sprintf("other-%d/lock", i)
		if !slices.Contains(slots, shard.SlotOf(name)) {
			prefix := layout.NamePrefix(name)
			keys = append(keys, prefix+"m/"+strconv.FormatInt(int64(lease.ID), 16)+"-0")
		}
	}
	value := fmt.Sprintf(`{"v":1,"identity":"bench-host/4242","at":%d,"granted":%d,"gen":1}`,
		time.Now().UnixMilli(), time.Now().UnixMilli())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * 128; i < len(keys); i += 8 * 128 {
				var ops []clientv3.Op
				for _, k := range keys[i:min(i+128, len(keys))] {
					ops = append(ops, clientv3.OpPut(k, value, clientv3.WithLease(lease.ID)))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// oldReads times, alone, the reads the previous design made while the
// slot was frozen: every key of the layout with its value, paged, for the
// drain, and in one unpaged Get for the completion records.
func oldReads(ctx context.Context, cli *clientv3.Client) string {
	start := time.Now()
	pages, largest := 0, 0
	for key, end := "etcdlock/", clientv3.GetPrefixRangeEnd("etcdlock/"); ; pages++ {
		resp, err := cli.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(1000))
		if err != nil {
			return "previous design's reads: " + err.Error()
		}
		largest = max(largest, proto.Size((*pb.RangeResponse)(resp)))
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	paged := time.Since(start)
	start = time.Now()
	resp, err := cli.Get(ctx, "etcdlock/", clientv3.WithPrefix())
	if err != nil {
		return "previous design's reads: " + err.Error()
	}
	return fmt.Sprintf("the previous design's reads in the freeze, alone: %d pages with values %v (largest %s) + one Get of %s %v",
		pages+1, paged.Round(time.Millisecond), sizeOf(uint64(largest)), sizeOf(uint64(proto.Size((*pb.RangeResponse)(resp)))), time.Since(start).Round(time.Millisecond))
}

// moveOnce holds moveNames names of slot with two waiters each, moves the
// slot from c0 to c1 in a child process, releases the holders once the
// slot is frozen and asks for one of the names then.
func moveOnce(ctx context.Context, d *deployment, slot int) (moveRun, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p, err := holdSlot(ctx, d, slot)
	if err != nil {
		return moveRun{}, err
	}
	defer p.close()
	spec, _ := json.Marshal(moverArgs{Root: d.clusters[0].Endpoints(), Slot: slot, To: "c1"})
	exe, err := os.Executable()
	if err != nil {
		return moveRun{}, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), moverEnv+"="+string(spec), "GOGC=10")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return moveRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return moveRun{}, err
	}
	run, err := p.follow(ctx, out)
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("mover: %w", werr)
	}
	return run, err
}

// follow reads the mover's lines: at "frozen" it releases the holders and
// asks for a name; at the end it waits for every party.
func (p *parties) follow(ctx context.Context, out interface{ Read([]byte) (int, error) }) (moveRun, error) {
	var run moveRun
	phases := map[string]time.Time{}
	lateAt := make(chan time.Time, 1)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "phase":
			phase, at, _ := strings.Cut(rest, " ")
			ns, _ := strconv.ParseInt(at, 10, 64)
			phases[phase] = time.Unix(0, ns)
			if phase == "frozen" {
				p.wg.Add(1)
				go p.release(ctx, lateAt)
			}
		case "result":
			if err := json.Unmarshal([]byte(rest), &run.res); err != nil {
				return run, err
			}
		}
	}
	if run.res.Err != "" || run.res.Took == 0 {
		return run, fmt.Errorf("mover: no result (%s)", run.res.Err)
	}
	if err := p.wait(); err != nil {
		return run, err
	}
	select {
	case at := <-lateAt:
		run.late = at.Sub(phases["frozen"])
	case <-ctx.Done():
		return run, ctx.Err()
	}
	run.frozen = phases["activated"].Sub(phases["frozen"])
	return run, nil
}

// parties are the sessions that use the moved slot: a holder of each name,
// two waiters of each, and one that asks for a name once the slot is
// frozen.
type parties struct {
	sessions []*shard.Session // holder, waiter, waiter, late
	names    []string
	held     []*etcdlock.Lock
	wg       sync.WaitGroup
	errs     chan error
}

func holdSlot(ctx context.Context, d *deployment, slot int) (*parties, error) {
	p := &parties{errs: make(chan error, 2*moveNames+1)}
	key := 0
	for shard.SlotOf(fmt.Sprintf("move-%d", key)) != slot {
		key++
	}
	for i := range moveNames {
		p.names = append(p.names, fmt.Sprintf("move-%d/lock-%d", key, i))
	}
	for range 4 {
		s, err := shard.NewSession(ctx, d.shards)
		if err != nil {
			p.close()
			return nil, err
		}
		p.sessions = append(p.sessions, s)
	}
	for _, name := range p.names {
		l, err := p.sessions[0].NewMutex(name).Lock(ctx)
		if err != nil {
			p.close()
			return nil, err
		}
		p.held = append(p.held, l)
	}
	for _, s := range p.sessions[1:3] {
		for _, name := range p.names {
			p.wg.Add(1)
			go p.lockOnce(ctx, s, name, nil)
		}
	}
	for _, name := range p.names { // every waiter in line before the move
		for {
			st, err := d.shards.Describe(ctx, name)
			if err != nil {
				p.close()
				return nil, err
			}
			if len(st.Waiters) == 2 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return p, nil
}

// lockOnce locks name, sends when it was granted to at (if not nil), and
// unlocks.
func (p *parties) lockOnce(ctx context.Context, s *shard.Session, name string, at chan<- time.Time) {
	defer p.wg.Done()
	l, err := s.NewMutex(name).Lock(ctx)
	if err != nil {
		p.errs <- fmt.Errorf("lock %s: %w", name, err)
		return
	}
	if at != nil {
		at <- time.Now()
	}
	if err := l.Unlock(ctx); err != nil {
		p.errs <- fmt.Errorf("unlock %s: %w", name, err)
	}
}

// release asks for the first name from the fourth session, then releases
// the holders (p.wg counts it already).
func (p *parties) release(ctx context.Context, lateAt chan<- time.Time) {
	go p.lockOnce(ctx, p.sessions[3], p.names[0], lateAt)
	for _, l := range p.held {
		if err := l.Unlock(ctx); err != nil {
			p.errs <- err
		}
	}
}

// wait waits for every waiter and the late ask; it returns the first error.
func (p *parties) wait() error {
	p.wg.Wait()
	select {
	case err := <-p.errs:
		return err
	default:
		return nil
	}
}

func (p *parties) close() {
	for _, s := range p.sessions {
		_ = s.Close()
	}
}
