package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
)

// lookCommand resolves CMD as exec does (PATH for a bare name), before
// etcdlock waits for anything, so that a typo fails at once with 127 (not
// found) or 126 (not runnable) instead of after the wait.
func lookCommand(argv0 string) (string, error) {
	path, err := exec.LookPath(argv0)
	if err != nil {
		return "", startError(argv0, err)
	}
	return path, nil
}

// startError maps a failure to find or start CMD to exit code 127 (not
// found) or 126 (found but not runnable).
func startError(argv0 string, err error) error {
	switch {
	case errors.Is(err, exec.ErrDot):
		return exitf(exitNotFound, "command %q not found in $PATH (it is in the current directory: use ./%s)", argv0, argv0)
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return exitf(exitNotFound, "command %q not found", argv0)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	return exitf(exitNotRunnable, "command %q cannot be run: %v", argv0, err)
}

// describeExit says how CMD ended, for etcdlock's log line.
func describeExit(argv0 string, how string) string {
	return fmt.Sprintf("command %q %s", argv0, how)
}
