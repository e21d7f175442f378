package etcdlock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// childEnv makes the test binary act as a client process that tests can
// SIGKILL or SIGSTOP, with ETCDLOCK_TEST_ENDPOINTS (comma separated),
// ETCDLOCK_TEST_NAME and ETCDLOCK_TEST_TTL:
//
//   - ETCDLOCK_TEST_CHILD=lock locks the name (with the lock-delay
//     ETCDLOCK_TEST_DELAY, if set), prints "HELD <token>" and waits to be
//     killed;
//   - ETCDLOCK_TEST_CHILD=lockall runs lockAllRounds on the names of
//     ETCDLOCK_TEST_NAME (comma separated, in that order) for
//     ETCDLOCK_TEST_ROUNDS rounds, and prints "DONE".
const childEnv = "ETCDLOCK_TEST_CHILD"

func runChild(mode string) int {
	if err := child(mode); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func child(mode string) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCDLOCK_TEST_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	ttl, err := time.ParseDuration(os.Getenv("ETCDLOCK_TEST_TTL"))
	if err != nil {
		return err
	}
	opts := []etcdlock.SessionOption{etcdlock.WithTTL(ttl), etcdlock.WithIdentity("child")}
	if d := os.Getenv("ETCDLOCK_TEST_DELAY"); d != "" {
		delay, err := time.ParseDuration(d)
		if err != nil {
			return err
		}
		opts = append(opts, etcdlock.WithLockDelay(delay))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := etcdlock.NewSession(ctx, cli, opts...)
	if err != nil {
		return err
	}
	defer s.Close()
	switch mode {
	case "lock":
		l, err := etcdlock.NewMutex(s, os.Getenv("ETCDLOCK_TEST_NAME")).Lock(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("HELD %d\n", l.Token())
		select {} // until killed
	case "lockall":
		rounds, err := strconv.Atoi(os.Getenv("ETCDLOCK_TEST_ROUNDS"))
		if err != nil {
			return err
		}
		if err := lockAllRounds(ctx, s, strings.Split(os.Getenv("ETCDLOCK_TEST_NAME"), ","), rounds, nil); err != nil {
			return err
		}
		fmt.Println("DONE")
		return nil
	}
	return fmt.Errorf("unknown child mode %q", mode)
}

// startChild starts the test binary as a child client of the shared
// cluster (see childEnv) in mode, with the given ETCDLOCK_TEST_ variables
// ("NAME=x" sets ETCDLOCK_TEST_NAME). It is killed at cleanup. It returns
// the process and its standard output.
func startChild(t *testing.T, mode string, vars ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "ETCDLOCK_TEST_ENDPOINTS="+strings.Join(shared.Endpoints(), ","))
	for _, v := range vars {
		cmd.Env = append(cmd.Env, "ETCDLOCK_TEST_"+v)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(out)
}
