package safety

// This file holds the porcupine model of the counter and the linearizability
// check of the increments.

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
	"github.com/etcdlock/etcdlock"
)

// modelInput is the input of one porcupine operation.
type modelInput struct {
	read    bool    // a read that returned value; else an increment from value
	value   int64   // what was read
	outcome Outcome // of the increment's write
	token   etcdlock.Token
}

// Model is the porcupine model of the counter: its state is the value, a
// read must return it, an acknowledged increment from v needs the value to
// be v and makes it v+1, and an increment of unknown outcome from v may
// have made v into v+1 or done nothing.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{int64(0)} },
		Step: func(state, input, _ any) []any {
			s, in := state.(int64), input.(modelInput)
			switch {
			case in.read:
				if s == in.value {
					return []any{s}
				}
				return nil
			case in.outcome == Acked:
				if s == in.value {
					return []any{s + 1}
				}
				return nil
			default: // Unknown
				if s == in.value {
					return []any{s, s + 1}
				}
				return []any{s}
			}
		},
		Hash: func(state any) uint64 { return uint64(state.(int64)) },
		DescribeOperation: func(input, _ any) string {
			in := input.(modelInput)
			switch {
			case in.read && in.token == 0:
				return fmt.Sprintf("final read() -> %d", in.value)
			case in.read:
				return fmt.Sprintf("read() -> %d [token %d, write refused or not sent]", in.value, in.token)
			case in.outcome == Acked:
				return fmt.Sprintf("incr(%d -> %d) ok [token %d]", in.value, in.value+1, in.token)
			}
			return fmt.Sprintf("incr(%d -> %d) ? [token %d]", in.value, in.value+1, in.token)
		},
		DescribeState: func(state any) string { return fmt.Sprint(state.(int64)) },
		DescribeOperationMetadata: func(info any) string {
			if s, ok := info.(string); ok {
				return s
			}
			return ""
		},
	}
	return nm.ToModel()
}

// Operations converts h to porcupine operations: an acknowledged increment
// spans its read's call to its write's return; a write of unknown outcome
// never returns (math.MaxInt64); an increment whose write was refused or not
// sent is the read alone; the final read comes last.
func Operations(h *History) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(h.Ops)+1)
	extra := 0
	for _, o := range h.Ops {
		in := modelInput{value: o.Value, outcome: o.Outcome, token: o.Token}
		op := porcupine.Operation{ClientId: o.Client, Input: in, Call: o.ReadCall,
			Metadata: fmt.Sprintf("client %d, token %d, %s", o.Client, o.Token, o.Outcome)}
		switch o.Outcome {
		case Acked:
			op.Return = o.WriteReturn
		case Unknown:
			op.Return = math.MaxInt64
		default:
			in.read = true
			op.Input = in
			op.Return = o.ReadReturn
		}
		ops = append(ops, op)
		extra = max(extra, o.Client+1)
	}
	ops = append(ops, porcupine.Operation{ClientId: extra, Input: modelInput{read: true, value: h.Final},
		Call: h.FinalAt, Return: h.FinalAt, Metadata: "final read"})
	// Give every never-returning operation a client of its own, so that
	// the visualization does not draw a client's later operations inside it.
	for i := range ops {
		if ops[i].Return == math.MaxInt64 {
			extra++
			ops[i].ClientId = extra
		}
	}
	return ops
}

// CheckLinearizable checks the increments of h with porcupine. When the
// result is not Ok and opts.VisualizationPath is set, it writes the
// visualization there and returns its path.
func CheckLinearizable(h *History, opts Options) (porcupine.CheckResult, string, error) {
	model := Model()
	ops := Operations(h)
	res, info := porcupine.CheckOperationsVerbose(model, ops, opts.Timeout)
	if res == porcupine.Ok || opts.VisualizationPath == "" {
		return res, "", nil
	}
	if err := porcupine.VisualizePath(model, info, opts.VisualizationPath); err != nil {
		return res, "", err
	}
	return res, opts.VisualizationPath, nil
}
