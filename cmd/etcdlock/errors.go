package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
)

// exitError ends etcdlock with code, after printing msg (if any) as one line
// "etcdlock: msg" on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitf returns an exitError with a formatted message.
func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// usagef returns a usage error (exit 1) that points to cmd's help.
func usagef(cmd *cobra.Command, format string, args ...any) error {
	return exitf(exitUsage, "%s (see '%s --help')", fmt.Sprintf(format, args...), cmd.CommandPath())
}

// errText makes an etcd or gRPC error readable on one line.
func errText(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time (context deadline exceeded)"
	}
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// libErr is a library error without its leading "etcdlock: " (etcdlock
// prints its own); the rest, names and causes, is as the library wrote it.
func libErr(err error) string {
	return strings.TrimPrefix(errText(err), "etcdlock: ")
}
