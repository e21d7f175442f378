package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestReadmeProgramIsThisOne: the README's first program is this file, so
// what the tests below check is what a newcomer copies.
func TestReadmeProgramIsThisOne(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindSubmatch(readme)
	self, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	body := self[strings.Index(string(self), "package main"):]
	if block == nil || string(block[1]) != string(body) {
		t.Fatal("the README's first Go program differs from examples/firstlock/main.go (from \"package main\" on): keep them the same")
	}
}

// TestCtrlC: SIGINT while the program holds the lock (or waits for it) ends
// it at once, with exit 0 while holding, and leaves the lock free.
func TestCtrlC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := embedtest.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	bin := filepath.Join(t.TempDir(), "firstlock")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	env := append(os.Environ(), "ETCDCTL_ENDPOINTS="+strings.Join(c.Endpoints(), ","))
	holder := startProgram(t, bin, env)
	holder.await(t, "holding billing/nightly")
	waiter := startProgram(t, bin, env) // queues behind the holder
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	waitState(t, ctx, cli, func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	for _, p := range []*program{waiter, holder} {
		start := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		err := p.cmd.Wait()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("exited %v after SIGINT", took)
		}
		if p == holder && err != nil {
			t.Errorf("the holder after SIGINT: %v; want exit 0", err)
		}
	}
	waitState(t, ctx, cli, func(st *etcdlock.LockState) bool { return st.Holder == nil && len(st.Waiters) == 0 })
}

type program struct {
	cmd   *exec.Cmd
	lines chan string // stderr, where log writes
}

func startProgram(t *testing.T, bin string, env []string) *program {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	p := &program{cmd: cmd, lines: make(chan string, 64)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p
}

// await waits for a line of the program's log containing s.
func (p *program) await(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("the program exited before logging %q", s)
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q logged within a minute", s)
		}
	}
}

// waitState waits until the state of billing/nightly satisfies cond.
func waitState(t *testing.T, ctx context.Context, cli *clientv3.Client, cond func(*etcdlock.LockState) bool) {
	t.Helper()
	for {
		st, err := etcdlock.Describe(ctx, cli, "billing/nightly")
		if err != nil {
			t.Fatal(err)
		}
		if cond(st) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("billing/nightly never reached the state; last %+v", st)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
