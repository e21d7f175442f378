package supervise

import (
	"os/exec"
	"syscall"
	"time"
)

// Child is a command started under supervision. Its methods are safe for
// concurrent use, but only one goroutine may call Loop.
type Child struct {
	// Set by Start, read-only after.
	pid  int              // the command's pid (its process group's id)
	done <-chan exitState // receives how the command ended, once
	sig  func(sig syscall.Signal, tree bool) error
}

// exitState is how a command ended, as its wait reported it.
type exitState struct {
	err       error // the wait failed: code and how are not set
	code      int   // the exit code to pass on (128+N for signal N)
	how       string
	success   bool
	leftovers int // processes of its tree still running when it exited, then terminated (Linux)
}

// Start starts cmd (whose Path must be resolved and whose SysProcAttr must
// be unset) in its own process group.
//
// On Linux the command runs under a small supervisor process (this
// executable, re-run: its main must call RunSubreaper first thing), a child
// subreaper that adopts every process the command starts, including
// background children, double forks and those that call setsid. When the
// command exits, the supervisor terminates whatever of its tree is left
// (SIGTERM, then SIGKILL grace later) before it reports the exit; when this
// process dies, even of SIGKILL, it kills the whole tree at once (SIGTERM,
// then SIGKILL at most half a second later). Elsewhere the command's process
// group stands for its tree.
//
// On failure Start returns an error that wraps exec's (a *fs.PathError with
// the errno of the failed start), so callers can tell a missing command from
// one that cannot run. It is safe for concurrent use with distinct cmds.
func Start(cmd *exec.Cmd, grace time.Duration) (*Child, error) {
	return startChild(cmd, grace)
}

// Signal sends sig to the command's process group (to the command alone on
// Windows, where SIGTERM and SIGKILL both kill it). It fails once the
// command is gone.
func (c *Child) Signal(sig syscall.Signal) error { return c.sig(sig, false) }

// SignalTree sends sig to every process of the command's tree: on Linux,
// every descendant of the supervisor (for SIGKILL, again and again until
// none is left); elsewhere, the process group. It fails once the command is
// gone.
func (c *Child) SignalTree(sig syscall.Signal) error { return c.sig(sig, true) }

// Pid returns the command's process id.
func (c *Child) Pid() int { return c.pid }
