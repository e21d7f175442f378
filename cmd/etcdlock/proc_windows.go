package main

import (
	"fmt"
	"os"
	"syscall"
)

// forwardedSignals are the signals etcdlock forwards to the command (and
// that end a wait for a lock).
var forwardedSignals = []os.Signal{os.Interrupt}

// groupAttr: Windows has no process groups in this sense.
func groupAttr() *syscall.SysProcAttr { return nil }

// signalGroup signals the child itself; Windows can only kill it.
func signalGroup(pid int, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		return p.Kill()
	}
	return p.Signal(sig)
}

// exitStatus returns the child's exit code and how it ended, in words.
func exitStatus(ps *os.ProcessState) (code int, how string) {
	code = ps.ExitCode()
	return code, fmt.Sprintf("exited with status %d", code)
}

// signalName returns the signal's name.
func signalName(sig os.Signal) string { return sig.String() }

// signalCode is the exit code for "interrupted by sig": 128+N.
func signalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128
}
