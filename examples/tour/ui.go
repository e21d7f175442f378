package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// cliPackage is the etcdlock command, built and run for --ui: the status
// page is the CLI's (`etcdlock ui`), so the tour shows exactly what an
// operator sees, and this module's own graph stays that of a library user.
const cliPackage = "github.com/etcdlock/etcdlock/cmd/etcdlock"

// servingLine is how `etcdlock ui` reports the address it serves on.
var servingLine = regexp.MustCompile(`on (http://\S+/) \(`)

// startUI serves etcdlock's status page of the tour's cluster on cfg.ui for
// as long as the tour runs (--ui), by running `etcdlock ui` (built with `go
// build` into a temporary directory: a first build can take a minute), and
// returns what stops it.
// It fails when the command cannot start or does not report its address
// within two minutes.
func (t *tour) startUI(ctx context.Context, c *embedtest.Cluster) (stop func(), err error) {
	t.say("ui", 0, "building `etcdlock ui` (go build %s; the first build takes a while)", cliPackage)
	dir, err := os.MkdirTemp("", "etcdlock-tour-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "etcdlock")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, cliPackage).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("go build %s: %w\n%s", cliPackage, err, out)
	}
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, bin, "--endpoints", strings.Join(c.Endpoints(), ","), "ui", "--listen", t.cfg.ui)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		cancel()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start etcdlock ui: %w", err)
	}
	urls := make(chan string, 1)
	drained := make(chan struct{})
	var tail []string // written by the reader before drained is closed
	go func() {
		defer close(drained)
		tail = readServing(stderr, urls)
	}()
	stop = func() {
		cancel()
		<-drained
		_ = cmd.Wait() // ended by us: its exit status says nothing new
		os.RemoveAll(dir)
	}
	select {
	case url := <-urls:
		t.say("ui", 0, "status page on %s: watch the queues move (it closes with the tour)", url)
		if t.cfg.onUI != nil {
			t.cfg.onUI(url)
		}
		return stop, nil
	case <-drained:
		stop()
		return nil, fmt.Errorf("etcdlock ui ended before serving:\n%s", strings.Join(tail, "\n"))
	case <-time.After(2 * time.Minute):
		stop()
		return nil, errors.New("etcdlock ui did not report its address within 2m")
	}
}

// readServing reads the command's stderr to its end, sends the page's URL to
// urls once it is reported, and returns the last 64 lines, for an error
// message.
func readServing(r io.Reader, urls chan<- string) (tail []string) {
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		if m := servingLine.FindStringSubmatch(line); m != nil && !sent {
			urls <- m[1]
			sent = true
		}
		if tail = append(tail, line); len(tail) > 64 {
			tail = tail[1:]
		}
	}
	return tail
}
