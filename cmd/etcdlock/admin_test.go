//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock"
)

// TestBreakOlderThan: break --older-than D leaves a holder that has been in
// the queue less than D and breaks one that has been there longer.
func TestBreakOlderThan(t *testing.T) {
	cli := newClient(t)
	name := uniqueName(t)
	s, l := hold(t, cli, name, "stuck/1")
	queueUp(t, cli, name, "next/2")
	code, out, stderr := run(t, "break", name, "--older-than", "1h")
	if code != exitUsage || out != "" || !strings.Contains(stderr, "less than --older-than 1h0m0s: left alone") {
		t.Fatalf("break --older-than 1h of a young grant: exit %d, stdout %q, stderr %q; want 1 and left alone", code, out, stderr)
	}
	if st := describe(t, cli, name); st.Holder == nil || st.Holder.Key != l.Key() {
		t.Fatalf("break --older-than 1h changed the holder: %+v", st.Holder)
	}
	code, out, stderr = run(t, "break", name, "--older-than", "1ns")
	if code != 0 || !strings.Contains(out, l.Key()) {
		t.Fatalf("break --older-than 1ns: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	checkBroken(t, cli, name, s, l)
	code, _, stderr = run(t, "break", name, "--older-than", "0s")
	if code != exitUsage {
		t.Fatalf("break --older-than 0s: exit %d, want 1", code)
	}
	oneErrorLine(t, stderr, "--older-than must be positive")
}

// TestStatusShowsSizeAndAge: status and ls show a semaphore's size and how
// long each key has been in the queue.
func TestStatusShowsSizeAndAge(t *testing.T) {
	cli := newClient(t)
	name := uniqueName(t)
	if _, err := etcdlock.NewSemaphore(openSession(t, cli, "sem/1"), name, 3).Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "status", name)
	lines := strings.Split(out, "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], "(semaphore of 3)") || !strings.Contains(lines[1], "IN QUEUE") ||
		strings.Contains(lines[2], " - ") {
		t.Fatalf("status: exit %d, stderr %q, table:\n%s", code, stderr, out)
	}
	code, out, stderr = run(t, "ls", name, "-o", "json")
	var got []lsJSON
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 1 || got[0].Size != 3 ||
		got[0].Holder.Size != 3 || got[0].Holder.InQueue == nil || got[0].Holder.Enqueued == "" {
		t.Fatalf("ls -o json: exit %d, stderr %q, %v: %s", code, stderr, err, out)
	}
}
