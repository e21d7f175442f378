package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"

	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/supervise"
)

// Until the command starts, a forwarded signal ends what etcdlock is doing
// (connecting, waiting); from then on, it goes to the command.

// notifySignals starts delivering the forwarded signals to a channel.
func notifySignals() (chan os.Signal, func()) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, supervise.ForwardedSignals()...)
	return sigs, func() { signal.Stop(sigs) }
}

// interrupted is the cause of a wait ended by a signal.
type interrupted struct{ sig os.Signal }

func (e *interrupted) Error() string { return "interrupted by " + supervise.SignalName(e.sig) }

// signalCatcher turns the first signal on sigs into the cancellation of its
// context (cause *interrupted), until stop.
type signalCatcher struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func catchSignals(sigs <-chan os.Signal) *signalCatcher {
	c := &signalCatcher{quit: make(chan struct{}), done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	go func() {
		defer close(c.done)
		select {
		case sig := <-sigs:
			c.cancel(&interrupted{sig})
		case <-c.quit:
		}
	}()
	return c
}

// stop ends the catching; later signals stay on the channel.
func (c *signalCatcher) stop() {
	c.once.Do(func() {
		close(c.quit)
		<-c.done
	})
}

// signal returns the signal that ended the context, or nil.
func (c *signalCatcher) signal() os.Signal {
	var ie *interrupted
	if errors.As(context.Cause(c.ctx), &ie) {
		return ie.sig
	}
	return nil
}

// onSignal is what a command makes of a signal that interrupted it while
// doing something ("connecting to etcd").
type onSignal func(sig os.Signal, doing string) error

// failure returns err, or on's error if a signal came (err is then only its
// consequence).
func (c *signalCatcher) failure(err error, doing string, on onSignal) error {
	if sig := c.signal(); sig != nil {
		return on(sig, doing)
	}
	return err
}

// interruptedWhile is run's and elect's (with a command) error for a signal:
// exit 128+N.
func interruptedWhile(sig os.Signal, doing string) error {
	return exitf(supervise.SignalCode(sig), "interrupted by %s while %s", supervise.SignalName(sig), doing)
}

// quietOnSignal is elect's (without a command) and observe's: a signal is
// how they end, with 0.
func quietOnSignal(os.Signal, string) error { return nil }

// untilSignal runs serve with a context that ends at the first signal on
// sigs, and returns serve's error once serve has returned.
func untilSignal(sigs <-chan os.Signal, serve func(context.Context) error) error {
	ctx, cancel := context.WithCancel(context.Background())
	caught := make(chan struct{})
	go func() {
		defer close(caught)
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := serve(ctx)
	cancel()
	<-caught
	return err
}
