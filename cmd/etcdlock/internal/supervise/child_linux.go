//go:build linux

package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startChild starts the supervisor (see Start), which starts cmd, and waits
// for it to report the start. The supervisor reads commands from a pipe
// whose write end only this process holds, so its end of file means that
// this process is gone.
func startChild(cmd *exec.Cmd, grace time.Duration) (*Child, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		closeAll(ctlR, ctlW)
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	sup := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        append([]string{supervisorArg0, grace.String(), cmd.Path}, cmd.Args...),
		Env:         append(envOf(cmd), supervisorEnv+"=1"),
		Dir:         cmd.Dir,
		Stdin:       cmd.Stdin,
		Stdout:      cmd.Stdout,
		Stderr:      cmd.Stderr,
		ExtraFiles:  []*os.File{ctlR, stW}, // fds 3 and 4
		SysProcAttr: groupAttr(),
	}
	err = sup.Start()
	closeAll(ctlR, stW) // the supervisor has them now
	if err != nil {
		closeAll(ctlW, stR)
		return nil, fmt.Errorf("start the supervisor of %s: %w", cmd.Path, err)
	}
	lines := bufio.NewScanner(stR)
	pid, err := readStart(lines, cmd.Path)
	if err != nil {
		closeAll(ctlW, stR)
		_ = sup.Wait()
		return nil, err
	}
	return supervised(pid, sup, ctlW, stR, lines), nil
}

// supervised returns the Child of the command the supervisor sup started
// (pid): its signals are lines on ctlW, and its exit is the report read from
// lines (the supervisor's stR), or, if none comes, how sup died.
func supervised(pid int, sup *exec.Cmd, ctlW, stR *os.File, lines *bufio.Scanner) *Child {
	c := &Child{pid: pid}
	done := make(chan exitState, 1)
	c.done = done
	var mu sync.Mutex // serializes writes to ctlW and its closing
	closed := false
	c.sig = func(sig syscall.Signal, tree bool) error {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return errors.New("the command has exited")
		}
		op := "g"
		if tree {
			op = "t"
		}
		_, err := fmt.Fprintf(ctlW, "%s %d\n", op, int(sig))
		return err
	}
	go func() {
		// The report comes first: the supervisor's own exit may take a
		// while (a -race build sleeps a second at exit).
		ex := readExit(lines)
		if ex != nil {
			done <- *ex
		}
		werr := sup.Wait()
		mu.Lock()
		closed = true
		_ = ctlW.Close()
		mu.Unlock()
		_ = stR.Close()
		if ex == nil {
			done <- *supervisorDied(sup, werr)
		}
	}()
	return c
}

// envOf returns the environment cmd would run with.
func envOf(cmd *exec.Cmd) []string {
	if cmd.Env != nil {
		return cmd.Env
	}
	return os.Environ()
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// readStart reads the supervisor's first line: "s PID" after the start, "e
// ERRNO" after a failed one.
func readStart(lines *bufio.Scanner, path string) (int, error) {
	if !lines.Scan() {
		return 0, fmt.Errorf("start %s: its supervisor ended before it started the command", path)
	}
	f := strings.Fields(lines.Text())
	if len(f) == 2 {
		n, err := strconv.Atoi(f[1])
		switch {
		case err == nil && f[0] == "s":
			return n, nil
		case err == nil && f[0] == "e":
			return 0, &fs.PathError{Op: "fork/exec", Path: path, Err: syscall.Errno(n)}
		}
	}
	return 0, fmt.Errorf("start %s: its supervisor said %q", path, lines.Text())
}

// readExit reads the supervisor's report of the command's end ("l N" for N
// leftover processes terminated, then "x WAITSTATUS"); nil if it ended
// without one.
func readExit(lines *bufio.Scanner) *exitState {
	var ex exitState
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			continue
		}
		switch f[0] {
		case "l":
			ex.leftovers = int(n)
		case "x":
			ws := syscall.WaitStatus(n)
			ex.code, ex.how = waitStatusText(ws)
			ex.success = ws.Exited() && ws.ExitStatus() == 0
			return &ex
		}
	}
	return nil
}

// supervisorDied is the exit of a command whose supervisor ended without
// reporting it (it was killed): the supervisor's own.
func supervisorDied(sup *exec.Cmd, werr error) *exitState {
	if sup.ProcessState == nil {
		return &exitState{err: werr}
	}
	code, how := ExitStatus(sup.ProcessState)
	return &exitState{code: code, how: "ended with its supervisor, which " + how}
}
