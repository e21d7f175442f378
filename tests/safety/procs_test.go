package safety

// This file holds the harness's side of the worker processes: starting
// them, reading their lines, stopping, resuming and killing them.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcdlock/etcdlock"
)

// spawn starts one more worker process.
func (c *cell) spawn() error {
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		return nil
	}
	id := c.nextID
	c.nextID++
	c.mu.Unlock()
	// The first steadyWorkers workers are steady: no worker fault touches
	// them, and their sessions have the library's default TTL, so they live
	// through link holds and member crashes, as most clients' do. A late
	// write can only hurt a session that outlives it.
	steady := id < steadyWorkers
	cmd := c.workerCmd(id, steady)
	p := &proc{id: id, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{}), steady: steady}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.stdin, p.pid = stdin, cmd.Process.Pid
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.procWG.Add(1)
	go func() {
		defer c.procWG.Done()
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.handle(p, sc.Text())
		}
		_, _ = io.Copy(io.Discard, stdout)
		c.exited(p, cmd.Wait())
	}()
	return nil
}

// workerCmd returns the command of worker id: the test binary in its worker
// role, with the cell's settings in its environment.
func (c *cell) workerCmd(id int, steady bool) *exec.Cmd {
	ttl := c.cfg.ttl
	if steady {
		ttl = steadyTTL
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envRole+"="+c.cfg.role,
		envEndpoints+"="+strings.Join(c.workerEndpoints(), ","),
		envName+"="+c.name,
		envTTL+"="+ttl.String(),
		envTarget+"="+c.target,
		envID+"="+fmt.Sprintf("worker-%d", id))
	if c.cfg.unbatched {
		cmd.Env = append(cmd.Env, envUnbatched+"=1")
	}
	if steady {
		cmd.Env = append(cmd.Env, envRotate+"="+c.randDur(steadyLife/2, steadyLife*3/2).String())
	}
	return cmd
}

// sendGo lets p write.
func (c *cell) sendGo(p *proc) { c.sendLine(p, "GO") }

// sendLine writes one line to p's standard input.
func (c *cell) sendLine(p *proc, line string) {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin != nil {
		_, _ = io.WriteString(p.stdin, line+"\n") // fails only once p is gone
	}
}

func (c *cell) closeStdin(p *proc) {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
}

// handle processes one line of worker p.
func (c *cell) handle(p *proc, line string) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	c.note(p, line)
	if f[0] == "ABOUT_TO_WRITE" && len(f) == 3 {
		c.aboutToWrite(p, etcdlock.Token(parseInt(f[1])), parseInt(f[2]))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if malformed(f) {
		c.errorfLocked("worker %d: malformed line %q", p.id, line)
		return
	}
	if !c.onSessionLine(p, f) {
		c.onGrantLine(p, line, f)
	}
}

// onSessionLine records a line about p's session, its cancels and its
// STATUS; false for a line of another kind. c.mu is held.
func (c *cell) onSessionLine(p *proc, f []string) bool {
	hexLease := func() int64 { v, _ := strconv.ParseUint(f[1], 16, 64); return int64(v) }
	switch f[0] {
	case "SESSION":
		p.lease = hexLease()
	case "LEASE_ALIVE":
		c.leaseAlives = append(c.leaseAlives, LeaseAlive{Lease: hexLease(), At: parseInt(f[2])})
	case "SESSION_LOST":
		c.n.sessionsLost++
		c.lost[hexLease()] = lostSession{worker: p.id, at: time.Now(), reason: strings.Join(f[2:], " ")}
	case "STATUS":
		p.status = strings.Join(f[2:], " ")
		select {
		case c.statusCh <- struct{}{}:
		default:
		}
	case "CANCELING":
		p.canceling = &Cancel{Client: p.id, Lease: hexLease(), Start: parseInt(f[2])}
	case "CANCELED":
		if cl := p.canceling; cl != nil {
			cl.End = parseInt(f[2])
			c.cancels = append(c.cancels, *cl)
			c.n.cancels++
			p.canceling = nil
		}
	default:
		return false
	}
	return true
}

// onGrantLine records a line about p's locks and writes. c.mu is held.
func (c *cell) onGrantLine(p *proc, line string, f []string) {
	switch f[0] {
	case "UNLOCK":
		c.onUnlock(p, f)
	case "LOCKERR":
		c.n.lockErrors++
	case "LOCKLOST":
		v, _ := strconv.ParseUint(f[1], 16, 64)
		c.lostWaits = append(c.lostWaits, LostWait{Client: p.id, Lease: int64(v), At: parseInt(f[2])})
		if f[3] == "alive" {
			c.leaseAlives = append(c.leaseAlives, LeaseAlive{Lease: int64(v), At: parseInt(f[2])})
		}
	case "GRANT":
		g := Grant{Client: p.id, Token: etcdlock.Token(parseInt(f[1])), Key: f[2], At: parseInt(f[3])}
		c.grants = append(c.grants, g)
		c.n.grants++
		p.grants++
		p.lease = leaseOfKey(g.Key)
	case "READ":
		c.onRead(p, line, f)
	case "WROTE":
		c.onWrote(p, line, f)
	}
}

// onUnlock records when p released the grant of token f[1]. c.mu is held.
func (c *cell) onUnlock(p *proc, f []string) {
	tok := etcdlock.Token(parseInt(f[1]))
	for i := len(c.grants) - 1; i >= 0; i-- {
		if g := &c.grants[i]; g.Client == p.id && g.Token == tok {
			if g.Released == 0 {
				g.Released = parseInt(f[2])
			}
			return
		}
	}
}

// onRead records p's read: pending until its write, or failed. c.mu is held.
func (c *cell) onRead(p *proc, line string, f []string) {
	switch f[4] {
	case "ok":
		if len(f) != 6 {
			c.errorfLocked("worker %d: malformed line %q", p.id, line)
			return
		}
		p.pend = &pending{token: etcdlock.Token(parseInt(f[1])), readCall: parseInt(f[2]), readRet: parseInt(f[3]), value: parseInt(f[5])}
	case "stale":
		c.n.staleReads++
		c.n.failed++
	default:
		c.n.readErrs++
		c.n.failed++
	}
}

// onWrote turns p's pending read and this write into an Op. c.mu is held.
func (c *cell) onWrote(p *proc, line string, f []string) {
	pd := p.pend
	p.pend = nil
	if pd == nil || pd.token != etcdlock.Token(parseInt(f[1])) {
		c.errorfLocked("worker %d: WROTE without its read: %q", p.id, line)
		return
	}
	op := Op{Client: p.id, Token: pd.token, ReadCall: pd.readCall, ReadReturn: pd.readRet, Value: pd.value,
		WriteCall: parseInt(f[2]), WriteReturn: parseInt(f[3])}
	switch f[4] {
	case "ok":
		op.Outcome = Acked
		c.n.acked++
	case "stale":
		op.Outcome = Rejected
		c.n.failed++
		c.n.staleWrites++
	case "unknown":
		op.Outcome = Unknown
		c.n.unknown++
	default: // skipped
		op.Outcome = NotSent
		c.n.failed++
	}
	c.ops = append(c.ops, op)
	if s := c.scen; s != nil && s.victim == p && s.victimOutcome == "" {
		s.victimOutcome = f[4]
		close(s.victimDone)
	}
}

// stop sends SIGSTOP to p and waits until every thread of it has stopped,
// so that nothing it does afterwards can come before the pause.
func (c *cell) stop(p *proc) {
	if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
		return // gone
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if allStopped(p.pid) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	c.errorf("worker %d: not stopped 5s after SIGSTOP", p.id)
}

// allStopped reports whether every thread of pid is stopped (or pid is gone).
func allStopped(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false
		}
		if st := b[i+2]; st != 'T' && st != 't' && st != 'Z' && st != 'X' {
			return false
		}
	}
	return true
}

func (c *cell) cont(p *proc) { _ = syscall.Kill(p.pid, syscall.SIGCONT) }

// exited records the end of p's process. A write that was let go and not
// reported has an unknown outcome; one that was never let go was not sent.
func (c *cell) exited(p *proc, waitErr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.exited = true
	if pd := p.pend; pd != nil {
		p.pend = nil
		op := Op{Client: p.id, Token: pd.token, ReadCall: pd.readCall, ReadReturn: pd.readRet, Value: pd.value}
		if pd.goSent {
			op.Outcome = Unknown
			c.n.unknown++
		} else {
			op.Outcome = NotSent
			c.n.failed++
		}
		c.ops = append(c.ops, op)
	}
	if s := c.scen; s != nil {
		if s.victim == p && s.victimOutcome == "" {
			s.victimOutcome = "exited"
			close(s.victimDone)
		}
		if s.held == p {
			s.held = nil
		}
	}
	out := p.stderr.String()
	switch {
	case !p.killed && !p.stopping:
		c.errorfLocked("worker %d exited on its own (%v); stderr:\n%s", p.id, waitErr, out)
	case !p.killed && waitErr != nil:
		c.errorfLocked("worker %d failed (%v); stderr:\n%s", p.id, waitErr, out)
	case strings.Contains(out, "DATA RACE") || strings.Contains(out, "panic:"):
		c.errorfLocked("worker %d; stderr:\n%s", p.id, out)
	}
}

// kill SIGKILLs p (stopped or not).
func (c *cell) kill(p *proc) {
	c.mu.Lock()
	p.killed = true
	c.mu.Unlock()
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
}

// killAll kills every worker still running (the cell failed half way).
func (c *cell) killAll() {
	c.mu.Lock()
	c.stopping = true
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			c.kill(p)
		}
	}
	c.procWG.Wait()
}

// stopWorkers lets every pending write go, closes every worker's stdin and
// waits for them to exit (SIGKILL after 40 s).
func (c *cell) stopWorkers() {
	c.mu.Lock()
	c.stopping = true
	procs := append([]*proc(nil), c.procs...)
	var toGo []*proc
	for _, p := range procs {
		p.stopping = true
		if p.pend != nil && !p.pend.goSent {
			p.pend.goSent = true
			toGo = append(toGo, p)
		}
	}
	c.mu.Unlock()
	for _, p := range toGo {
		c.sendGo(p)
	}
	for _, p := range procs {
		c.closeStdin(p)
	}
	deadline := time.After(40 * time.Second)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			c.mu.Lock()
			c.n.forcedKills++
			c.errorfLocked("worker %d did not exit within 40s of the end; killed", p.id)
			c.mu.Unlock()
			c.kill(p)
			<-p.done
		}
	}
}

// workerEndpoints are the members' endpoints, each through its link.
func (c *cell) workerEndpoints() []string {
	eps := c.c.Endpoints()
	for i, l := range c.links {
		eps[i] = l.Endpoints()[i]
	}
	return eps
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
