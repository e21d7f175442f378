package main

import (
	"strings"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/spf13/cobra"
)

// The positional arguments of the subcommands, checked before etcdlock
// connects.

// splitAtDash splits the arguments of a command line "NAMES... -- CMD...":
// exactly len(names) arguments before "--" and at least one after it. With
// optional, "-- CMD" may be left out altogether (argv is nil then).
func splitAtDash(cmd *cobra.Command, args []string, names []string, required bool) (before, argv []string, err error) {
	want := strings.Join(names, " ")
	dash := cmd.ArgsLenAtDash()
	if dash < 0 {
		switch {
		case required && len(args) > len(names):
			return nil, nil, usagef(cmd, `missing "--" between %s and the command`, want)
		case required && len(args) == len(names):
			return nil, nil, usagef(cmd, `missing "-- CMD" after %s`, want)
		case required:
			return nil, nil, usagef(cmd, `missing %s -- CMD`, strings.Join(names[len(args):], " "))
		case len(args) != len(names):
			if len(args) > len(names) {
				return nil, nil, usagef(cmd, `want %s, got %d arguments (put "--" before a command)`, want, len(args))
			}
			return nil, nil, usagef(cmd, `missing %s`, strings.Join(names[len(args):], " "))
		}
		return args, nil, nil
	}
	if dash != len(names) {
		if dash < len(names) {
			return nil, nil, usagef(cmd, `missing %s before "--"`, strings.Join(names[dash:], " "))
		}
		return nil, nil, usagef(cmd, `want only %s before "--", got %d arguments`, want, dash)
	}
	if len(args) == dash {
		return nil, nil, usagef(cmd, `missing the command after "--"`)
	}
	return args[:dash], args[dash:], nil
}

// checkName checks NAME before etcdlock connects, with the library's rule
// (layout.ValidateName).
func checkName(cmd *cobra.Command, name string) error {
	if name == "" {
		return usagef(cmd, "NAME must not be empty")
	}
	if err := layout.ValidateName(name, etcdlock.ErrInvalidName); err != nil {
		return usagef(cmd, "%s", libErr(err))
	}
	return nil
}

// checkPrefix checks a name prefix (ls PREFIX, ui --prefix) before etcdlock
// connects: valid UTF-8 of at most 1024 bytes, as a name. A prefix that
// starts with "etcdlock/" is allowed (a name may), but it is more likely the
// etcd key prefix given by mistake: a note on stderr says so.
func (a *app) checkPrefix(cmd *cobra.Command, what, prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := layout.ValidateName(prefix, etcdlock.ErrInvalidName); err != nil {
		return usagef(cmd, "%s: %s", what, libErr(err))
	}
	if rest, ok := strings.CutPrefix(prefix, "etcdlock/"); ok {
		a.logf("note: %s %q is a prefix of lock names, not of etcd keys (every key is under %q already): did you mean %q?",
			what, prefix, "etcdlock/", rest)
	}
	return nil
}

// exactArgs checks for exactly the named positional arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return usagef(cmd, "missing %s", names[len(args)])
		case len(args) > len(names):
			return usagef(cmd, "too many arguments: want %d, got %d", len(names), len(args))
		}
		return nil
	}
}

// checkOutput checks an --output value.
func checkOutput(cmd *cobra.Command, output string, allowed ...string) error {
	for _, v := range allowed {
		if output == v {
			return nil
		}
	}
	return usagef(cmd, "--output must be one of %v, not %q", allowed, output)
}

// checkNameAndOutput checks the NAME argument and -o of a command that
// prints one name's state.
func checkNameAndOutput(cmd *cobra.Command, name, output string, allowed ...string) error {
	if err := checkName(cmd, name); err != nil {
		return err
	}
	return checkOutput(cmd, output, allowed...)
}
