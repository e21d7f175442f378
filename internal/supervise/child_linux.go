//go:build linux

package supervise

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startChild starts cmd in its own process group with the parent-death
// signal set to SIGKILL, and returns a channel that receives cmd.Wait's
// result.
//
// Linux sends the parent-death signal when the thread that started the child
// exits, not when the process does, and the Go runtime may end idle threads.
// So cmd is started from a goroutine locked to its OS thread, and that
// goroutine stays (locked) in cmd.Wait until the child is gone. If this process
// dies, even of SIGKILL, the child gets SIGKILL. Grandchildren are not
// covered.
func startChild(cmd *exec.Cmd) (<-chan error, error) {
	attr := groupAttr()
	attr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr = attr
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}
