package safety

// This file holds what the harness shows of a cell: its trace, the
// visualization and the history of a failed check.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// vizPath says where a failed check writes its visualization:
// $ETCDLOCK_SAFETY_ARTIFACTS, else t.TempDir() for a self-test (whose
// failure is expected), else the system's temporary directory.
func (c *cell) vizPath() string {
	file := "etcdlock-safety-" + strings.ReplaceAll(c.cfg.name, "/", "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".html"
	switch dir := os.Getenv("ETCDLOCK_SAFETY_ARTIFACTS"); {
	case dir != "":
		return filepath.Join(dir, file)
	case c.cfg.expectFail:
		return filepath.Join(c.t.TempDir(), file)
	}
	return filepath.Join(os.TempDir(), file)
}

// trace logs the state of the workers and members twice a second
// (ETCDLOCK_SAFETY_TRACE=1): P paused, B in a targeted pause, W between
// read and write.
func (c *cell) trace(ctx context.Context, start time.Time) {
	for sleepCtx(ctx, 500*time.Millisecond) {
		c.mu.Lock()
		var ws []string
		for _, p := range c.procs {
			if p.exited {
				continue
			}
			s := fmt.Sprintf("w%d", p.id)
			if p.paused {
				s += "P"
			}
			if p.busy {
				s += "B"
			}
			if p.pend != nil {
				s += "W"
			}
			ws = append(ws, s)
		}
		line := fmt.Sprintf("%5.1fs acked=%d grants=%d sessions-lost=%d workers=%v", time.Since(start).Seconds(),
			c.n.acked, c.n.grants, c.n.sessionsLost, ws)
		c.mu.Unlock()
		var ms []string
		for _, m := range c.c.Members() {
			s := m.Name()
			if !m.Running() {
				s += "(down)"
			}
			if m.Isolated() {
				s += "(isolated)"
			}
			ms = append(ms, s)
		}
		c.t.Logf("%s members=%v", line, ms)
	}
}

// dumpHistory writes h as JSON to path, for a failed check.
func (c *cell) dumpHistory(h *History, path string) {
	b, err := json.MarshalIndent(h, "", " ")
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		c.t.Logf("history: %v", err)
		return
	}
	c.t.Logf("history written to %s", path)
}

func (c *cell) snapshot() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n.String()
}

// recentLines is how many of a worker's last lines stallReport shows.
const recentLines = 12

// note keeps line as one of p's recent lines.
func (c *cell) note(p *proc, line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.recent = append(p.recent, fmt.Sprintf("%s %s", time.Now().Format(stamp), line))
	if len(p.recent) > recentLines {
		p.recent = p.recent[len(p.recent)-recentLines:]
	}
}
