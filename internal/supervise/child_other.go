//go:build !linux

package supervise

import "os/exec"

// startChild starts cmd in its own process group (where the platform has
// them) and returns a channel that receives cmd.Wait's result. There is no
// parent-death signal here: if this process is killed with SIGKILL, the child
// lives on.
func startChild(cmd *exec.Cmd) (<-chan error, error) {
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done, nil
}
