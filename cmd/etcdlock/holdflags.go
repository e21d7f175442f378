package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// holdOpts are the flags of run and elect.
type holdOpts struct {
	ttl         time.Duration
	wait        time.Duration
	waitSet     bool
	grace       time.Duration
	identity    string
	metricsAddr string
	maxRuntime  time.Duration // run only; 0: no cap
	lockDelay   time.Duration // run only; 0: none
}

// The defaults and bounds of the hold flags.
const (
	defaultTTL   = 10 * time.Second
	defaultGrace = 2 * time.Second
	// renewDivisor: run, elect and observe renew their lease every TTL/10
	// (the library's default is TTL/3). With the default TTL and grace a
	// command rides out an outage of etcd, or of the path to it, of up to
	// TTL - TTL/10 - TTL/100 - 50ms - grace = 6.85 s before it gets SIGTERM
	// (docs/cli.md, "The outage a job rides out"). One process renewing once a second costs
	// the etcd leader nothing to speak of.
	renewDivisor = 10
	maxTTL       = 24 * time.Hour
)

func (o *holdOpts) register(f *pflag.FlagSet, forLock bool) {
	o.ttl = defaultTTL
	f.Var((*ttlFlag)(&o.ttl), "ttl", "session lease TTL, whole seconds: 10 or 10s (etcd's unit; the server may grant more, its minimum)")
	waitHelp := "give up (exit 124) if not leading after this long (default: wait forever)"
	if forLock {
		waitHelp = "give up (exit 124) if the lock is not granted after this long; 0: only if free and nobody waits (default: wait forever)"
	}
	f.DurationVar(&o.wait, "wait", 0, waitHelp)
	f.DurationVar(&o.grace, "grace", defaultGrace, "time between SIGTERM and SIGKILL when the lease is running out or lost; at most TTL/2")
	f.Lookup("grace").DefValue = "2s or TTL/2, whichever is smaller"
	f.StringVar(&o.identity, "identity", "", `identity stored with the key, shown by status (default "hostname/pid")`)
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on /metrics and the session's health on /healthz at this address (host:port)")
	if forLock {
		f.DurationVar(&o.lockDelay, "lock-delay", 0, "if this session is lost while holding (etcdlock killed, its host cut off), the lock passes on only this long after its lease ends (at most 1m); a fallback for resources that cannot check $ETCDLOCK_TOKEN")
		f.DurationVar(&o.maxRuntime, "max-runtime", 0, "cap the command's run: SIGTERM to it at this time after its start, SIGKILL --grace later, then release and exit 124 (default: no cap)")
	}
}

// ttlFlag is --ttl: whole seconds, as a bare integer (etcdctl's form, 10)
// or a duration (10s, 1m).
type ttlFlag time.Duration

func (t *ttlFlag) String() string { return time.Duration(*t).String() }
func (t *ttlFlag) Type() string   { return "duration" }

func (t *ttlFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if n, nerr := strconv.ParseInt(s, 10, 64); nerr == nil {
		d, err = time.Duration(n)*time.Second, nil
	}
	switch {
	case err != nil:
		return fmt.Errorf("want whole seconds such as 10 or 10s, not %q", s)
	case d < time.Second || d%time.Second != 0:
		return fmt.Errorf("want whole seconds of at least 1 (etcd's unit), not %v", d)
	}
	*t = ttlFlag(d)
	return nil
}

// check validates the flags; zeroWait says whether --wait 0 is allowed.
func (o *holdOpts) check(cmd *cobra.Command, zeroWait bool) error {
	f := cmd.Flags()
	o.waitSet = f.Changed("wait")
	if !f.Changed("grace") {
		o.grace = min(defaultGrace, o.ttl/2)
	}
	if err := o.checkLease(cmd); err != nil {
		return err
	}
	switch {
	case o.maxRuntime < 0 || (f.Changed("max-runtime") && o.maxRuntime == 0):
		return usagef(cmd, "--max-runtime must be positive, not %v", o.maxRuntime)
	case o.waitSet && o.wait < 0:
		return usagef(cmd, "--wait must not be negative, not %v", o.wait)
	case o.waitSet && o.wait == 0 && !zeroWait:
		return usagef(cmd, "--wait must be positive, not %v", o.wait)
	case f.Changed("identity") && o.identity == "":
		return usagef(cmd, "--identity must not be empty")
	case o.lockDelay < 0 || o.lockDelay > time.Minute:
		return usagef(cmd, "--lock-delay must be between 0 and 1m, not %v", o.lockDelay)
	}
	return nil
}

// checkLease validates --ttl and --grace.
func (o *holdOpts) checkLease(cmd *cobra.Command) error {
	switch {
	case o.ttl <= 0 || o.ttl > maxTTL:
		return usagef(cmd, "--ttl must be > 0 and at most %v, not %v", maxTTL, o.ttl)
	case o.grace < 0:
		return usagef(cmd, "--grace must not be negative, not %v", o.grace)
	case o.grace > o.ttl/2:
		return usagef(cmd, "--grace %v must be at most half the TTL (%v)", o.grace, o.ttl/2)
	}
	return nil
}
