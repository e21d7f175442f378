package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func (a *app) electCmd() *cobra.Command {
	var o holdOpts
	var output string
	cmd := &cobra.Command{
		Use:   "elect NAME VALUE [flags] [-- CMD [ARGS...]]",
		Short: "Campaign for leadership; run a command while leading, or print leadership changes",
		Long: `Campaign in the election NAME with VALUE (candidates lead in the order they
campaigned) and hold leadership.

With CMD, run it once leading, exactly as run does (signals forwarded, SIGTERM
and SIGKILL when the lease runs out or leadership is lost, the same exit
codes), with ETCDLOCK_NAME, ETCDLOCK_KEY, ETCDLOCK_TOKEN and ETCDLOCK_VALUE set;
resign when it exits.

Without CMD, print every leadership change (this process's own term is marked)
until interrupted, then resign and exit 0; exit 125 if leadership is lost.`,
		Example: `  etcdlock elect reports/leader 10.0.0.7:8080 -- ./serve-reports
  etcdlock elect reports/leader 10.0.0.7:8080 -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			_, _, err := splitAtDash(cmd, args, []string{"NAME", "VALUE"}, false)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			before, argv, _ := splitAtDash(cmd, args, []string{"NAME", "VALUE"}, false)
			name, value := before[0], before[1]
			if err := checkName(cmd, name); err != nil {
				return err
			}
			if err := o.check(cmd, false); err != nil {
				return err
			}
			if err := checkOutput(cmd, output, "text", "json"); err != nil {
				return err
			}
			if argv == nil {
				return a.electPrint(&o, name, value, output)
			}
			path, err := lookCommand(argv[0])
			if err != nil {
				return err
			}
			return a.holdAndRun(&o, "leadership", name, path, argv, func(ctx context.Context, s *etcdlock.Session) (*grant, error) {
				l, err := etcdlock.NewElection(s, name).Campaign(ctx, value)
				if err != nil {
					return nil, err
				}
				return &grant{what: "leadership", name: name, key: l.Key(), token: l.Token(), ctx: l.Context(),
					release: l.Resign, env: []string{"ETCDLOCK_VALUE=" + value}}, nil
			})
		},
	}
	o.register(cmd.Flags(), false)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "how to print leadership changes without CMD: text or json (one object per line)")
	return cmd
}

func (a *app) observeCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "observe NAME",
		Short: "Print every leader change of an election until interrupted",
		Long: `Print the current leader of the election NAME, then every change (a new
leader, a proclaimed value, "no leader"), one line each, until interrupted.
A slow reader may skip intermediate states but always sees the latest.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName(cmd, args[0]); err != nil {
				return err
			}
			if err := checkOutput(cmd, output, "text", "json"); err != nil {
				return err
			}
			return a.observe(args[0], output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json (one object per line)")
	return cmd
}

// leaderJSON is one line of elect's and observe's JSON output.
type leaderJSON struct {
	Leader   bool   `json:"leader"`
	Value    string `json:"value,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Key      string `json:"key,omitempty"`
	Identity string `json:"identity,omitempty"`
	Lease    string `json:"lease,omitempty"`
	Self     bool   `json:"self,omitempty"`
}

// printLeader prints one leadership state; self marks this process's term.
func (a *app) printLeader(info etcdlock.LeaderInfo, self bool, output string) {
	if output == "json" {
		v := leaderJSON{Leader: info.Key != ""}
		if v.Leader {
			v.Value, v.Token, v.Key, v.Identity, v.Lease, v.Self = info.Value, int64(info.Token), info.Key, info.Identity, leaseHex(info.Lease), self
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(a.stdout, "%s\n", b)
		return
	}
	if info.Key == "" {
		fmt.Fprintln(a.stdout, "no leader")
		return
	}
	mark := ""
	if self {
		mark = " (this process)"
	}
	fmt.Fprintf(a.stdout, "leader %s token=%d identity=%s lease=%s%s\n",
		strconv.Quote(info.Value), info.Token, strconv.Quote(info.Identity), leaseHex(info.Lease), mark)
}

// leaseHex formats a lease ID as etcd and the key layout do.
func leaseHex(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }

// checkElection fails if name is used by another kind of recipe (Observe
// would retry that forever).
func (a *app) checkElection(e *etcdlock.Election) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.commandTimeout)
	defer cancel()
	if _, err := e.Leader(ctx); err != nil && !errors.Is(err, etcdlock.ErrNoLeader) {
		return exitf(exitUsage, "%s", libErr(err))
	}
	return nil
}

// electPrint is elect without a command: campaign, print every leadership
// change, resign when interrupted.
func (a *app) electPrint(o *holdOpts, name, value, output string) error {
	sigs, stopNotify := notifySignals()
	defer stopNotify()
	sc := catchSignals(sigs)
	defer sc.stop()
	cli, err := a.connect(sc.ctx)
	if err != nil {
		if sc.signal() != nil {
			return nil
		}
		return err
	}
	defer cli.Close()
	s, err := a.openSession(sc.ctx, cli, o)
	if err != nil {
		if sc.signal() != nil {
			return nil
		}
		return err
	}
	defer a.closeSession(s)
	sc.stop()
	if err := a.precheck(context.Background(), cli, name); err != nil {
		return err
	}
	e := etcdlock.NewElection(s, name)
	if err := a.checkElection(e); err != nil {
		return err
	}

	octx, stopObserve := context.WithCancel(context.Background())
	defer stopObserve()
	infos := e.Observe(octx)
	cctx, stopCampaign := context.WithCancel(context.Background())
	defer stopCampaign()
	type result struct {
		l   *etcdlock.Leadership
		err error
	}
	won := make(chan result, 1)
	go func() {
		l, err := e.Campaign(cctx, value)
		won <- result{l, err}
	}()
	var timeout <-chan time.Time
	if o.waitSet {
		t := time.NewTimer(o.wait)
		defer t.Stop()
		timeout = t.C
	}
	var (
		lead *etcdlock.Leadership
		lost <-chan struct{}
	)
	resign := func() {
		stopCampaign()
		if won != nil {
			if r := <-won; r.err == nil {
				lead = r.l
			}
		}
		if lead != nil {
			rctx, cancel := context.WithTimeout(context.Background(), min(s.TTL(), maxRelease))
			defer cancel()
			if err := lead.Resign(rctx); err != nil && !errors.Is(err, etcdlock.ErrNotHeld) {
				a.logf("warning: resign: %s", libErr(err))
			}
		}
	}
	for {
		select {
		case info, ok := <-infos:
			if !ok {
				resign()
				return exitf(exitUsage, "observing election %q ended: the client was closed", name)
			}
			a.printLeader(info, info.Key != "" && info.Lease == s.Lease(), output)
		case r := <-won:
			won = nil
			if r.err != nil {
				return exitf(exitUsage, "%s", libErr(r.err))
			}
			lead, lost, timeout = r.l, r.l.Context().Done(), nil
		case <-lost:
			return exitf(exitLost, "leadership %q was lost: %s", name, lossText(context.Cause(lead.Context())))
		case <-timeout:
			stopCampaign()
			r := <-won // a Campaign that won before it was canceled still leads
			won = nil
			if r.err != nil {
				return exitf(exitWaitTimeout, "timed out after %v (--wait) waiting for leadership %q", o.wait, name)
			}
			lead, lost, timeout = r.l, r.l.Context().Done(), nil
		case <-sigs:
			resign()
			return nil
		}
	}
}

// observe prints every leader change of name until interrupted.
func (a *app) observe(name, output string) error {
	sigs, stopNotify := notifySignals()
	defer stopNotify()
	sc := catchSignals(sigs)
	defer sc.stop()
	cli, err := a.connect(sc.ctx)
	if err != nil {
		if sc.signal() != nil {
			return nil
		}
		return err
	}
	defer cli.Close()
	// Observe needs a Session although it writes nothing: its lease holds
	// no key and is revoked on exit.
	s, err := a.openSession(sc.ctx, cli, &holdOpts{ttl: defaultTTL})
	if err != nil {
		if sc.signal() != nil {
			return nil
		}
		return err
	}
	defer a.closeSession(s)
	sc.stop()
	e := etcdlock.NewElection(s, name)
	if err := a.checkElection(e); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	infos := e.Observe(ctx)
	for {
		select {
		case info, ok := <-infos:
			if !ok {
				return exitf(exitUsage, "observing election %q ended: the client was closed", name)
			}
			a.printLeader(info, false, output)
		case <-sigs:
			return nil
		}
	}
}
