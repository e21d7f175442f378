package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// The password never comes from the command line, where ps shows it.

// credentials returns the user name and the password: from
// $ETCDCTL_USER="user:password", else --password-file, else
// $ETCDCTL_PASSWORD, else one line of stdin.
func (c *connFlags) credentials(stdin *os.File, stderr io.Writer) (user, password string, err error) {
	if c.userFromEnv {
		if u, p, ok := strings.Cut(c.user, ":"); ok {
			return u, p, nil
		}
	}
	env, envSet := os.LookupEnv("ETCDCTL_PASSWORD")
	password, err = findPassword(c.passwordFile, env, envSet, func() (string, error) {
		return readPassword(stdin, stderr)
	})
	return c.user, password, err
}

// scrubPasswordEnv removes the password from the process's environment once
// it is read, so that the command run or elect starts does not inherit it:
// $ETCDCTL_PASSWORD goes, and $ETCDCTL_USER keeps only the user name.
// (/proc/PID/environ of etcdlock itself still shows the environment it was
// started with, to its own user and root.)
func scrubPasswordEnv() {
	_ = os.Unsetenv("ETCDCTL_PASSWORD")
	if u, ok := os.LookupEnv("ETCDCTL_USER"); ok {
		if name, _, found := strings.Cut(u, ":"); found {
			_ = os.Setenv("ETCDCTL_USER", name)
		}
	}
}

// findPassword picks the password source: the file, else the environment
// variable, else stdin (through readStdin).
func findPassword(file, env string, envSet bool, readStdin func() (string, error)) (string, error) {
	switch {
	case file == "-":
		return readStdin()
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("password file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case envSet:
		return env, nil
	}
	return readStdin()
}

// readPassword reads one line from stdin: after a prompt and without echo on
// a terminal. It reads byte by byte, so that the rest of stdin stays for the
// command that run starts.
func readPassword(stdin *os.File, stderr io.Writer) (string, error) {
	if stdin == nil {
		return "", errors.New("no password: use --password-file or $ETCDCTL_PASSWORD")
	}
	if isTerminal(stdin) {
		fmt.Fprint(stderr, "Password: ")
		b, err := readNoEcho(stdin)
		fmt.Fprintln(stderr)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	line, err := readLine(stdin)
	if err != nil {
		return "", fmt.Errorf("read password from stdin: %w", err)
	}
	return line, nil
}

// readLine reads up to a newline (not included) or EOF, one byte at a time.
func readLine(r io.Reader) (string, error) {
	var b []byte
	var one [1]byte
	for {
		n, err := r.Read(one[:])
		if n == 1 {
			if one[0] == '\n' {
				break
			}
			b = append(b, one[0])
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
	}
	return strings.TrimRight(string(b), "\r"), nil
}
