package supervise

import (
	"os/exec"
	"syscall"
)

// Child is a command started in its own process group. Its methods are safe
// for concurrent use, but only one goroutine may call Supervise.
type Child struct {
	cmd  *exec.Cmd
	done <-chan error // receives cmd.Wait's result
}

// Start starts cmd in its own process group (on Linux, also with the
// parent-death signal set to SIGKILL, so the child dies with this process).
// It sets cmd.SysProcAttr. On failure it returns exec.Cmd.Start's error
// unchanged, so callers can tell a missing command from one that cannot
// run. It is safe for concurrent use with distinct cmds.
func Start(cmd *exec.Cmd) (*Child, error) {
	done, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	return &Child{cmd: cmd, done: done}, nil
}

// Signal sends sig to the child's process group (to the child alone on
// Windows, where SIGTERM and SIGKILL both kill it). It fails once the group
// is gone.
func (c *Child) Signal(sig syscall.Signal) error {
	return signalGroup(c.cmd.Process.Pid, sig)
}
