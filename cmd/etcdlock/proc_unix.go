//go:build unix

package main

import (
	"fmt"
	"os"
	"syscall"
)

// forwardedSignals are the signals etcdlock forwards to the command's
// process group (and that end a wait for a lock).
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// groupAttr puts the child in a process group of its own.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

// exitStatus returns the exit code etcdlock passes on for a child that
// ended with ps (128+N for signal N) and how it ended, in words.
func exitStatus(ps *os.ProcessState) (code int, how string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), "was killed by " + signalName(ws.Signal())
	}
	code = ps.ExitCode()
	return code, fmt.Sprintf("exited with status %d", code)
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
}

// signalName returns "SIGTERM" and the like.
func signalName(sig os.Signal) string {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return sig.String()
	}
	if name, ok := signalNames[s]; ok {
		return name
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}

// signalCode is the exit code for "interrupted by sig": 128+N.
func signalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128
}
