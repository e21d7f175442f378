//go:build unix

package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestOnceShowAndClear: once show prints a name's last completed run (and
// status shows it too); once clear asks for its id, refuses a wrong answer,
// deletes it when confirmed (or with --force), after which the id runs
// again; and a clear whose record changed after it was shown deletes
// nothing.
func TestOnceShowAndClear(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	complete := func(id string) {
		t.Helper()
		m := etcdlock.NewMutex(locktest.OpenSession(t, cli, etcdlock.WithIdentity("job/1")), name)
		if err := m.RunOnce(embedtest.Context(t, long), id, func(context.Context, *etcdlock.Lock) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	checkOnceShow(t, name, complete)
	checkOnceClearConfirms(t, name, complete)
	if code, out, _ := run(t, "run", name, "--once", "2026-12-04", "--", "echo", "ran again"); code != 0 || out != "ran again" {
		t.Fatalf("run --once after the clear: exit %d, stdout %q", code, out)
	}
	if code, out, _ := run(t, "once", "clear", name, "--force"); code != 0 || !strings.Contains(out, "cleared") {
		t.Fatalf("once clear --force: exit %d, stdout %q", code, out)
	}
	if code, _, stderr := run(t, "once", "clear", name, "--force"); code != exitUsage || !strings.Contains(stderr, "nothing to clear") {
		t.Fatalf("once clear of no record: exit %d, stderr %q", code, stderr)
	}
}

// checkOnceShow: once show of a fresh name, of a record (text and JSON),
// status's line, and run --once of an earlier id naming the recorded one.
func checkOnceShow(t *testing.T, name string, complete func(id string)) {
	t.Helper()
	code, out, _ := run(t, "once", "show", name)
	if code != 0 || !strings.Contains(out, "has no completion record") {
		t.Fatalf("once show of a fresh name: exit %d, %q", code, out)
	}
	complete("2026-12-03")
	code, out, _ = run(t, "once", "show", name, "-o", "json")
	var rec struct{ ID, Identity string }
	if err := json.Unmarshal([]byte(out), &rec); code != 0 || err != nil || rec.ID != "2026-12-03" || rec.Identity != "job/1" {
		t.Fatalf("once show -o json: exit %d, %v: %s", code, err, out)
	}
	if code, out, _ = run(t, "status", name); code != 0 || !strings.Contains(out, `last completed run (--once): "2026-12-03"`) {
		t.Fatalf("status: exit %d, %q; want the last completed run", code, out)
	}
	// "already done" names the recorded id.
	code, _, stderr := run(t, "run", name, "--once", "2026-12-01", "--", "false")
	if code != 0 || !strings.Contains(stderr, `the last completed run is "2026-12-03"`) {
		t.Fatalf("run --once of an earlier id: exit %d, stderr %q", code, stderr)
	}
}

// checkOnceClearConfirms: once clear refuses a wrong id and a record that
// changed after it was shown, and clears the record it showed once the
// operator types its id (the record is then 2026-12-04's, now gone).
func checkOnceClearConfirms(t *testing.T, name string, complete func(id string)) {
	t.Helper()
	p := startIn(t, "2026-12-02\n", nil, append(endpointFlags(), "once", "clear", name)...)
	if code, _ := p.wait(); code != exitUsage || !strings.Contains(p.stderr.String(), "not confirmed") {
		t.Fatalf("once clear with a wrong id: exit %d, stderr %q", code, p.stderr.String())
	}
	// Shown, then a later run completes, then confirmed: nothing cleared.
	pr, pw := io.Pipe()
	p = startReading(t, pr, nil, append(endpointFlags(), "once", "clear", name)...)
	p.waitStderr("Type the id")
	complete("2026-12-04")
	_, _ = io.WriteString(pw, "2026-12-03\n")
	_ = pw.Close()
	if code, _ := p.wait(); code != exitUsage || !strings.Contains(p.stderr.String(), "a later run completed after it was shown") {
		t.Fatalf("once clear of a record that changed: exit %d, stderr %q", code, p.stderr.String())
	}
	p = startIn(t, "2026-12-04\n", nil, append(endpointFlags(), "once", "clear", name)...)
	if code, out := p.wait(); code != 0 || !strings.Contains(out, "cleared") {
		t.Fatalf("once clear confirmed: exit %d, stdout %q, stderr %q", code, out, p.stderr.String())
	}
}
