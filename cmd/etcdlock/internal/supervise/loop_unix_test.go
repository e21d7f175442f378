//go:build unix

package supervise

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startSleeper starts a shell that sleeps until signaled.
func startSleeper(t *testing.T) *Child {
	t.Helper()
	c, err := Start(exec.Command("/bin/sh", "-c", "exec sleep 60"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.SignalTree(syscall.SIGKILL) })
	return c
}

func TestLoopTerminatesOnLoss(t *testing.T) {
	c := startSleeper(t)
	grant, lose := context.WithCancelCause(context.Background())
	var events []Event
	lose(errBroken)
	r := c.Loop(Config{
		Grace:      10 * time.Second,
		ValidUntil: func() time.Time { return time.Now().Add(time.Minute) },
		Grant:      grant,
		Notify:     func(ev Event) { events = append(events, ev) },
	})
	if !errors.Is(r.LossCause, errBroken) || !r.Terminated {
		t.Errorf("result %+v, want the loss cause and Terminated", r)
	}
	if len(events) != 1 || events[0].Kind != Lost || !errors.Is(events[0].Cause, errBroken) {
		t.Errorf("events %+v, want one Lost", events)
	}
	if r.Code != 128+int(syscall.SIGTERM) || r.Success {
		t.Errorf("child %s (code %d), want killed by SIGTERM", r.How, r.Code)
	}
}

func TestSuperviseForwardsSignals(t *testing.T) {
	c := startSleeper(t)
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGINT
	r := c.Loop(Config{
		Grace:      time.Second,
		ValidUntil: func() time.Time { return time.Now().Add(time.Minute) },
		Grant:      context.Background(),
		Signals:    sigs,
	})
	if r.LossCause != nil || r.Terminated {
		t.Errorf("result %+v, want no loss and no termination by the supervisor", r)
	}
	if r.Code != 128+int(syscall.SIGINT) {
		t.Errorf("child %s (code %d), want killed by SIGINT", r.How, r.Code)
	}
}

func TestStartReportsExitStatus(t *testing.T) {
	for _, tc := range []struct {
		script  string
		code    int
		success bool
	}{
		{"exit 0", 0, true},
		{"exit 3", 3, false},
		{"kill -KILL $$", 128 + int(syscall.SIGKILL), false},
	} {
		t.Run(tc.script, func(t *testing.T) {
			c, err := Start(exec.Command("/bin/sh", "-c", tc.script), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			r := c.Loop(Config{
				ValidUntil: func() time.Time { return time.Now().Add(time.Minute) },
				Grant:      context.Background(),
			})
			if r.Err != nil || r.Code != tc.code || r.Success != tc.success {
				t.Errorf("result %+v, want code %d, success %v", r, tc.code, tc.success)
			}
		})
	}
}

func TestStartFailure(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		path string
		want error
	}{
		{"missing", dir + "/missing", os.ErrNotExist},
		{"not executable", dir, os.ErrPermission},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(&exec.Cmd{Path: tc.path, Args: []string{tc.path}}, time.Second)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Start = %v, %v; want an error wrapping %v", c, err, tc.want)
			}
		})
	}
}
