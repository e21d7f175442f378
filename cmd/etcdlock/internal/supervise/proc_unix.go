//go:build unix

package supervise

import (
	"fmt"
	"os"
	"syscall"
)

// ForwardedSignals returns the signals a supervisor forwards to the child's
// process group (and that end a wait for a lock): SIGINT, SIGTERM, SIGHUP
// and SIGQUIT. It returns a new slice on each call, so callers may keep it.
func ForwardedSignals() []os.Signal {
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}
}

// groupAttr puts the child in a process group of its own.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

// ExitStatus returns the exit code to pass on for a child that ended with
// ps (128+N for signal N) and how it ended, in words ("exited with status
// 3", "was killed by SIGKILL"). It cannot fail and is safe for concurrent
// use.
func ExitStatus(ps *os.ProcessState) (code int, how string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		return waitStatusText(ws)
	}
	code = ps.ExitCode()
	return code, fmt.Sprintf("exited with status %d", code)
}

// waitStatusText is ExitStatus for a wait status.
func waitStatusText(ws syscall.WaitStatus) (code int, how string) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), "was killed by " + SignalName(ws.Signal())
	}
	return ws.ExitStatus(), fmt.Sprintf("exited with status %d", ws.ExitStatus())
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
}

// SignalName returns "SIGTERM" and the like, or "signal N (description)"
// for a signal without a short name. It is safe for concurrent use.
func SignalName(sig os.Signal) string {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return sig.String()
	}
	if name, ok := signalNames[s]; ok {
		return name
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}
