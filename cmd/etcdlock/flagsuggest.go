package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagError is the root's flag error func: a usage error, with the flag
// the user probably meant when the flag is unknown and one of cmd's is
// close (cobra suggests only for commands).
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if typed, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		if s := suggestFlag(cmd.Flags(), typed); s != "" {
			msg += fmt.Sprintf("; did you mean --%s?", s)
		}
	}
	return usagef(cmd, "%s", msg)
}

// suggestFlag returns the visible flag of fs closest to typed: within an
// edit distance of 2 (a swap of two neighbours counting 1), and of at most
// a third of typed's length, so that a short flag is not matched by
// anything; "" if none is.
func suggestFlag(fs *pflag.FlagSet, typed string) string {
	best, bestDist := "", min(2, max(1, len(typed)/3))+1
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if d := editDistance(typed, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of neighbours, each 1.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1) // row i-2
	prev := make([]int, len(b)+1)  // row i-1
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
