//go:build !linux

package main

import (
	"errors"
	"os"
)

// isTerminal reports whether f looks like a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// readNoEcho is not available here: etcdlock will not read a password that
// the terminal would show.
func readNoEcho(*os.File) ([]byte, error) {
	return nil, errors.New("cannot turn terminal echo off on this platform: use --password-file or $ETCDCTL_PASSWORD")
}
