package supervise

import (
	"fmt"
	"os"
	"syscall"
)

// ForwardedSignals returns the signals a supervisor forwards to the child
// (and that end a wait for a lock): os.Interrupt. It returns a new slice on
// each call, so callers may keep it.
func ForwardedSignals() []os.Signal { return []os.Signal{os.Interrupt} }

// groupAttr: Windows has no process groups in this sense.
func groupAttr() *syscall.SysProcAttr { return nil }

// signalGroup signals the child itself; Windows can only kill it.
func signalGroup(pid int, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return fmt.Errorf("find process %d: %w", pid, err)
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		return p.Kill()
	}
	return p.Signal(sig)
}

// ExitStatus returns the child's exit code and how it ended, in words
// ("exited with status 3"). It cannot fail and is safe for concurrent use.
func ExitStatus(ps *os.ProcessState) (code int, how string) {
	code = ps.ExitCode()
	return code, fmt.Sprintf("exited with status %d", code)
}

// SignalName returns the signal's name. It is safe for concurrent use.
func SignalName(sig os.Signal) string { return sig.String() }
