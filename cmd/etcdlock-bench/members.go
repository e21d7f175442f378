package main

// The members in a process of their own (-etcd-process): the bench starts
// itself again as the members' process, so that no contestant shares etcd's
// address space, as in a deployment (an embedded member answers a client of
// its own process without a second process waking up; etcdlock serve, a
// process of its own, never has that).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// membersEnv makes the bench the members' process: "N FSYNC" starts N
// members, prints "ENDPOINTS e1,e2,..." and serves until its stdin closes.
const membersEnv = "ETCDLOCK_BENCH_MEMBERS"

// etcdCluster is what the rate scenarios (uncontended, hot, serve) need of
// the members.
type etcdCluster interface {
	Endpoints() []string
	Client() (*clientv3.Client, error)
}

// runMembers is the members' process.
func runMembers(arg string) int {
	ns, fs, _ := strings.Cut(arg, " ")
	n, err := strconv.Atoi(ns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdlock-bench members:", err)
		return 2
	}
	c, err := embedtest.New(context.Background(), embedtest.WithMembers(n), embedtest.WithFsync(fs == "true"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdlock-bench members:", err)
		return 1
	}
	fmt.Printf("ENDPOINTS %s\n", strings.Join(c.Endpoints(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin) // until the bench goes
	// A member may take long to close while a contestant's server-side
	// watches linger (v3lock's); the process's end frees them anyway.
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		fmt.Fprintln(os.Stderr, "etcdlock-bench members: not closed within 10 s; exiting")
	}
	return 0
}

// remoteMembers are members in the child process it started.
type remoteMembers struct {
	cmd       *exec.Cmd
	stdin     io.Closer
	endpoints []string
}

// startMembers starts the members' process.
func startMembers(o options) (*remoteMembers, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %v", membersEnv, o.members, o.fsync))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &remoteMembers{cmd: cmd, stdin: in}
	line, err := bufio.NewReader(out).ReadString('\n')
	eps, ok := strings.CutPrefix(strings.TrimSpace(line), "ENDPOINTS ")
	if err != nil || !ok {
		m.Close()
		return nil, fmt.Errorf("the members' process: %q %v", line, err)
	}
	m.endpoints = strings.Split(eps, ",")
	return m, nil
}

func (m *remoteMembers) Endpoints() []string { return m.endpoints }

func (m *remoteMembers) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: m.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// Close ends the members' process (it stops when its stdin closes).
func (m *remoteMembers) Close() error {
	_ = m.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- m.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		return errors.Join(errors.New("the members' process did not stop"), <-done)
	}
}

// startCluster starts the members: in this process (c, for every
// scenario), or with -etcd-process in a child (c nil). rates serves the
// rate scenarios either way; stop ends the members.
func startCluster(ctx context.Context, o options) (c *embedtest.Cluster, rates etcdCluster, stop func(), err error) {
	if o.etcdProcess {
		m, err := startMembers(o)
		if err != nil {
			return nil, nil, nil, err
		}
		return nil, m, func() { _ = m.Close() }, nil
	}
	c, err = embedtest.New(ctx, embedtest.WithMembers(o.members), embedtest.WithFsync(o.fsync))
	if err != nil {
		return nil, nil, nil, err
	}
	return c, c, func() { _ = c.Close() }, nil
}
