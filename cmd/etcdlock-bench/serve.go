package main

// The serve scenario: grants per second through etcdlock serve (a real
// process on loopback TCP) beside the library, etcd's own v3lock service
// and the Put+Delete floor, on distinct names and on one hot name, and
// serve's CPU per grant. The serve contestants:
//
//	serve-stream   POST /v1/hold on a kept connection, DELETE /v1/holds/<id>
//	               to release (answered once committed), then the stream's
//	               end: the pattern the Python client uses
//
// Each worker speaks HTTP/1.1 on kept connections of its own, synchronously
// (serve_conn.go). With -etcd-process the members run in a process of their
// own (members.go), so that serve, the library and v3lock all reach etcd
// across a process boundary, as in a deployment.
//	serve-session  a session per worker: POST .../lock, POST .../unlock
//	v3lock         etcd's Lock and Unlock RPCs on a lease per worker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// serveScenario runs the serve contestants at 1, 16 and 64 workers (or
// -workers), each worker its own name and then all on one.
func serveScenario(ctx context.Context, c etcdCluster, o options) []Result {
	srv, err := startServe(c, o)
	if err != nil {
		return []Result{{Scenario: "serve", Contestant: "serve", Note: "not run: " + err.Error()}}
	}
	defer srv.stop()
	saved := contestants
	defer func() { contestants = saved }()
	all := []contestant{contestantNamed(saved, "limit"), contestantNamed(saved, "etcdlock"),
		srv.streamContestant(), srv.sessionContestant(), v3lockContestant}
	var rs []Result
	for _, hot := range []bool{false, true} {
		name, cts := "serve", all
		if hot {
			name = "serve-hot"
			if !o.etcdProcess {
				// v3lock is left out on one name unless the members run
				// apart: with 16 waiters it grants about 160 a second,
				// with 64 a few, and its server-side watches then keep
				// an embedded member from closing.
				cts = all[:len(all)-1]
			}
		}
		contestants = cts
		for _, n := range o.counts([]int{1, 16, 64}) {
			rs = append(rs, relativeTo("etcdlock", cell(ctx, c, o, name, n, hot))...)
		}
	}
	return rs
}

// contestantNamed returns the contestant called name among cts.
func contestantNamed(cts []contestant, name string) contestant {
	for _, ct := range cts {
		if ct.name == name {
			return ct
		}
	}
	return contestant{name, func(context.Context, *clientv3.Client) (func(string, int) worker, func(), error) {
		return nil, nil, fmt.Errorf("contestant %s is not selected (-contestants)", name)
	}}
}

// relativeTo notes each row's rate as a multiple of base's in the cell.
func relativeTo(base string, rs []Result) []Result {
	var b float64
	for _, r := range rs {
		if r.Contestant == base {
			b = r.PerSecond
		}
	}
	for i := range rs {
		if rs[i].Contestant == base || b == 0 || rs[i].PerSecond == 0 {
			continue
		}
		note := fmt.Sprintf("%.2fx %s", rs[i].PerSecond/b, base)
		if rs[i].Note != "" {
			note += ", " + rs[i].Note
		}
		rs[i].Note = note
	}
	return rs
}

// serveProc is a running etcdlock serve.
type serveProc struct {
	cmd  *exec.Cmd
	base string // http://host:port
}

// startServe builds the etcdlock command (unless -etcdlock names one) and
// starts its serve on the cluster, on loopback TCP, with bounds above what
// the scenario opens.
func startServe(c etcdCluster, o options) (*serveProc, error) {
	bin := o.etcdlockBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "etcdlock-bench")
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(dir, "etcdlock")
		build := exec.Command("go", "build", "-o", bin, "./cmd/etcdlock")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building etcdlock (run from the repository's root, or give -etcdlock): %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, "--endpoints", strings.Join(c.Endpoints(), ","), "serve", "--listen", "127.0.0.1:0",
		"--max-client-streams", "100000", "--max-streams", "100000", "--max-client-sessions", "1000", "--max-sessions", "1000")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`tcp://([0-9.]+:\d+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return &serveProc{cmd: cmd, base: "http://" + a}, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, errors.New("etcdlock serve did not start within 30 s")
	}
}

func (p *serveProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	_ = p.cmd.Wait()
}

// cpu returns the serve process's CPU time so far (user and system).
func (p *serveProc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
}
