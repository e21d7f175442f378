//go:build linux

package supervise

// This file holds the supervisor process: a child subreaper between
// etcdlock and the command, so that no process of the command's tree
// outlives etcdlock or its grant.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// supervisorArg0 and supervisorEnv mark a supervisor process: both must
	// be set, and the command does not inherit the variable.
	supervisorArg0 = "etcdlock-supervisor"
	supervisorEnv  = "ETCDLOCK_SUPERVISOR"
	// orphanGrace bounds the time between SIGTERM and SIGKILL for the tree
	// of a command whose etcdlock died.
	orphanGrace = 500 * time.Millisecond
	// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
	prSetChildSubreaper = 36
)

// RunSubreaper runs this process as a command's subreaper and exits, if
// Start started it as one; otherwise it returns at once. A program that
// calls Start must call it first thing in main.
func RunSubreaper() {
	if len(os.Args) < 4 || os.Args[0] != supervisorArg0 || os.Getenv(supervisorEnv) != "1" {
		return
	}
	if err := subreap(); err != nil {
		fmt.Fprintf(os.Stderr, "etcdlock: supervisor: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// subreaper is the state of the subreaper process. Only its main
// goroutine uses it.
type subreaper struct {
	grace  time.Duration
	job    int           // the command's pid
	ctl    <-chan string // etcdlock's commands; closed when etcdlock is gone
	exited <-chan syscall.WaitStatus
	status *os.File // where the start and the exit are reported
}

// subreap starts the command, carries out etcdlock's commands until it
// exits or etcdlock is gone, then terminates what is left of its tree.
func subreap() error {
	// The command's parent-death signal is tied to the thread that starts
	// it: this one, for the life of the process.
	runtime.LockOSThread()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("become a child subreaper: %w", errno)
	}
	// etcdlock forwards these to the command; they are not for us.
	signal.Notify(make(chan os.Signal, 1), ForwardedSignals()...)
	grace, err := time.ParseDuration(os.Args[1])
	if err != nil {
		return fmt.Errorf("grace %q: %w", os.Args[1], err)
	}
	ctlF, status := os.NewFile(3, "control"), os.NewFile(4, "status")
	if ctlF == nil || status == nil {
		return errors.New("started without its pipes")
	}
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	job, err := startJob(os.Args[2], os.Args[3:])
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		_, werr := fmt.Fprintf(status, "e %d\n", int(errno))
		return werr
	}
	if _, err := fmt.Fprintf(status, "s %d\n", job); err != nil {
		return err
	}
	s := &subreaper{grace: grace, job: job, ctl: readCommands(ctlF), exited: reap(job), status: status}
	return s.run()
}

// startJob starts the command in a process group of its own, with SIGKILL
// as its parent-death signal.
func startJob(path string, argv []string) (int, error) {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, supervisorEnv+"=") {
			env = append(env, kv)
		}
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	_ = p.Release() // reap waits for it
	return pid, nil
}

// run is the supervisor's life: carry out commands until the command exits
// (then end its leftovers and report) or etcdlock is gone (then end the
// whole tree).
func (s *subreaper) run() error {
	for {
		select {
		case c, ok := <-s.ctl:
			if !ok {
				s.terminateTree(min(s.grace, orphanGrace))
				return nil
			}
			s.carryOut(c)
		case ws := <-s.exited:
			n := len(descendants())
			if n > 0 {
				s.terminateTree(s.grace)
				if _, err := fmt.Fprintf(s.status, "l %d\n", n); err != nil {
					return err
				}
			}
			_, err := fmt.Fprintf(s.status, "x %d\n", uint32(ws))
			return err
		}
	}
}

// carryOut carries out one command of etcdlock's: "g SIG" signals the
// command's process group, "t SIG" every process of its tree.
func (s *subreaper) carryOut(c string) {
	f := strings.Fields(c)
	if len(f) != 2 {
		return
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return
	}
	sig := syscall.Signal(n)
	switch {
	case f[0] == "g":
		_ = syscall.Kill(-s.job, sig) // the group may be gone
	case f[0] == "t" && sig == syscall.SIGKILL:
		killTree()
	case f[0] == "t":
		signalTree(sig)
	}
}

// terminateTree sends SIGTERM to every process of the tree, waits up to
// grace for them to exit (carrying out etcdlock's commands meanwhile), then
// kills what is left.
func (s *subreaper) terminateTree(grace time.Duration) {
	signalTree(syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(descendants()) > 0 {
		select {
		case <-deadline.C:
			killTree()
			return
		case c, ok := <-s.ctl:
			if !ok {
				s.ctl = nil
				deadline.Reset(min(grace, orphanGrace))
				continue
			}
			s.carryOut(c)
		case <-tick.C:
		}
	}
}

// signalTree sends sig to every process of the tree once, and SIGCONT
// after a SIGTERM, so that a stopped process gets it too.
func signalTree(sig syscall.Signal) {
	for _, pid := range descendants() {
		_ = syscall.Kill(pid, sig) // it may have exited meanwhile
		if sig == syscall.SIGTERM {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// killTree sends SIGKILL to every process of the tree until none is left:
// a process that forks meanwhile leaves an orphan, which this subreaper
// adopts and the next pass finds.
func killTree() {
	for {
		ps := descendants()
		if len(ps) == 0 {
			return
		}
		for _, pid := range ps {
			_ = syscall.Kill(pid, syscall.SIGKILL) // it may have exited meanwhile
		}
		time.Sleep(time.Millisecond)
	}
}

// readCommands delivers etcdlock's commands, one per line; the channel is
// closed when etcdlock closes the pipe or dies.
func readCommands(f *os.File) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// reap waits for every child (the command and the orphans this subreaper
// adopts) and delivers the command's wait status. It ends when no child is
// left.
func reap(job int) <-chan syscall.WaitStatus {
	ch := make(chan syscall.WaitStatus, 1)
	go func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case errors.Is(err, syscall.EINTR):
			case err != nil:
				return
			case pid == job:
				ch <- ws
			}
		}
	}()
	return ch
}

// descendants returns the pids of this process's descendants that have not
// exited, from /proc.
func descendants() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, live := procParent(pid); live {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// procParent returns pid's parent and whether pid is live (not a zombie),
// from /proc/PID/stat: "PID (COMM) STATE PPID ...", where COMM may hold
// anything.
func procParent(pid int) (ppid int, live bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, err == nil
}
