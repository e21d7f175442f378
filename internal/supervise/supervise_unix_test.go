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
func startSleeper(t *testing.T) (*Child, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "exec sleep 60")
	c, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Signal(syscall.SIGKILL) })
	return c, cmd
}

func TestSuperviseTerminatesOnLoss(t *testing.T) {
	c, cmd := startSleeper(t)
	grant, lose := context.WithCancelCause(context.Background())
	var events []Event
	lose(errBroken)
	r := c.Supervise(Config{
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
	if code, how := ExitStatus(cmd.ProcessState); code != 128+int(syscall.SIGTERM) {
		t.Errorf("child %s (code %d), want killed by SIGTERM", how, code)
	}
}

func TestSuperviseForwardsSignals(t *testing.T) {
	c, cmd := startSleeper(t)
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGINT
	r := c.Supervise(Config{
		Grace:      time.Second,
		ValidUntil: func() time.Time { return time.Now().Add(time.Minute) },
		Grant:      context.Background(),
		Signals:    sigs,
	})
	if r.LossCause != nil || r.Terminated {
		t.Errorf("result %+v, want no loss and no termination by the supervisor", r)
	}
	if code, how := ExitStatus(cmd.ProcessState); code != 128+int(syscall.SIGINT) {
		t.Errorf("child %s (code %d), want killed by SIGINT", how, code)
	}
}
