//go:build !linux

package supervise

import (
	"os/exec"
	"syscall"
	"time"
)

// startChild starts cmd in its own process group (where the platform has
// them). There is no supervisor here: if this process is killed with
// SIGKILL, the command lives on, and a process that leaves the group is
// neither signaled nor waited for.
func startChild(cmd *exec.Cmd, _ time.Duration) (*Child, error) {
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan exitState, 1)
	go func() {
		err := cmd.Wait()
		if cmd.ProcessState == nil {
			done <- exitState{err: err}
			return
		}
		code, how := ExitStatus(cmd.ProcessState)
		done <- exitState{code: code, how: how, success: cmd.ProcessState.Success()}
	}()
	pid := cmd.Process.Pid
	return &Child{pid: pid, done: done, sig: func(sig syscall.Signal, _ bool) error { return signalGroup(pid, sig) }}, nil
}

// RunSubreaper returns at once: only Linux runs a supervisor process.
func RunSubreaper() {}
