package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/examples/fenced-store/store"
)

// TestTour runs the whole tour, as CI does with `go run ./examples/tour`:
// it fails if any promise the tour shows is broken.
//
// It runs with --ui on a free port, and checks that the status page shows
// the tour's locks while it runs.
func TestTour(t *testing.T) {
	var out bytes.Buffer
	seen := make(chan map[string]bool, 1)
	ctx, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	cfg := config{members: 5, ttl: 3 * time.Second, ui: "127.0.0.1:0", onUI: func(url string) {
		go func() { seen <- watchPage(ctx, url) }()
	}}
	err := run(context.Background(), cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	stopWatching()
	select {
	case names := <-seen:
		if len(names) < 2 {
			t.Errorf("the status page showed %d held names while the tour ran (%v), want its locks and its election", len(names), names)
		}
	case <-time.After(30 * time.Second):
		t.Error("the tour did not serve its status page")
	}
	for _, want := range []string{"== 1.", "== 2.", "== 3.", "== 4.", "== 5.", "== 6. Summary", "REJECTED", "Every promise held."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}

// TestFlags checks that bad flags are refused before anything starts.
func TestFlags(t *testing.T) {
	for _, cfg := range []config{{members: 2, ttl: 3 * time.Second}, {members: 5, ttl: time.Second}, {members: 5, ttl: 2500 * time.Millisecond}} {
		if err := run(context.Background(), cfg, new(bytes.Buffer)); err == nil {
			t.Errorf("run(%+v) = nil, want an error", cfg)
		}
	}
}

// TestBrokenPromiseFails checks the tour's own checks without a cluster: a
// stale write the store admits, a token that does not increase, and a
// current write the store rejects each count as a broken promise, and the
// tour's verdict is then an error (a non-zero exit).
func TestBrokenPromiseFails(t *testing.T) {
	srv := httptest.NewServer(store.New())
	defer srv.Close()
	var out bytes.Buffer
	tr := &tour{cfg: config{members: 3, ttl: 2 * time.Second}, out: &out, tl: &out, start: time.Now(),
		tokens: make(map[string][]etcdlock.Token), store: &store.Client{BaseURL: srv.URL}}
	ctx := t.Context()

	if err := tr.write(ctx, "a", "k", 5, "v", mustAdmit); err != nil {
		t.Fatal(err)
	}
	if err := tr.verdict(nil); err != nil {
		t.Fatalf("verdict with no broken promise: %v", err)
	}
	if err := tr.write(ctx, "b", "k", 7, "v", mustReject); !errors.Is(err, errBroken) {
		t.Errorf("a stale write admitted: %v, want errBroken", err)
	}
	if err := tr.write(ctx, "c", "k", 6, "v", mustAdmit); !errors.Is(err, errBroken) {
		t.Errorf("a current write rejected: %v, want errBroken", err)
	}
	tr.granted("n", 9, false)
	tr.granted("n", 9, false)
	tr.summary(nil)
	if err := tr.verdict(nil); !errors.Is(err, errBroken) {
		t.Fatalf("verdict = %v, want errBroken", err)
	}
	if len(tr.broken) != 3 || !strings.Contains(out.String(), "BROKEN: 3 promise(s)") {
		t.Fatalf("broken = %q; output:\n%s", tr.broken, out.String())
	}
}

// TestTourCtrlC: SIGINT ends the tour within seconds, in the middle of its
// first part, after stopping its sessions and cluster: exit 130 and
// "tour: interrupted".
func TestTourCtrlC(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tour")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--members", "3")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.Contains(sc.Text(), "== 1.") {
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "tour: interrupted") {
			t.Fatalf("after SIGINT: exit %d, stderr %q; want 130 and \"tour: interrupted\"", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tour still runs 30 s after SIGINT")
	}
}

// watchPage polls the status page's /api/locks until ctx ends (or the
// page closes with the tour) and returns the names it saw held.
func watchPage(ctx context.Context, url string) map[string]bool {
	held := map[string]bool{}
	for ctx.Err() == nil {
		resp, err := http.Get(url + "api/locks")
		if err != nil {
			return held // the tour has ended
		}
		var page struct {
			Locks []struct {
				Name   string `json:"name"`
				Holder *struct {
					Token int64 `json:"token"`
				} `json:"holder"`
			} `json:"locks"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		for _, l := range page.Locks {
			if l.Holder != nil {
				held[l.Name] = true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return held
}
