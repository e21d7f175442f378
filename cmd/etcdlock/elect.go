package main

import (
	"context"

	"github.com/spf13/cobra"
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
until interrupted, then resign and exit 0; exit 125 if leadership is lost.

At the root of a sharded deployment the election lives on the cluster its
slot is on, as with run; a member cluster that is not the root is refused.`,
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
			return a.holdAndRun(&o, "leadership", []string{name}, path, argv, func(ctx context.Context, h *held, _ bool) (*grant, error) {
				l, err := h.s.NewElection(name).Campaign(ctx, value)
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
