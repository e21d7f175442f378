//go:build unix

package main

// In cmd/etcdlock, not internal/serve: the client process of the network-namespace tests.

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// vanishChildEnv makes the test binary an HTTP client of the server at its
// value (host:port) that holds ETCDLOCK_TEST_NAME by stream with ttl 5 s,
// prints "HELD", then waits by stream for ETCDLOCK_TEST_WAIT_NAME, prints
// "SENT", and waits to be cut off (TestServeVanishedClient).
const vanishChildEnv = "ETCDLOCK_TEST_HTTP_VANISH"

func vanishChild(addr string) int {
	post := func(body string) (*http.Response, error) {
		return http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(body))
	}
	resp, err := post(fmt.Sprintf(`{"name":%q,"ttl":"5s"}`, os.Getenv("ETCDLOCK_TEST_NAME")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.Contains(line, `"granted"`) {
		fmt.Fprintln(os.Stderr, resp.Status, line, err)
		return 1
	}
	fmt.Println("HELD")
	go func() {
		if _, err := post(fmt.Sprintf(`{"name":%q,"ttl":"5s","wait":"1h"}`, os.Getenv("ETCDLOCK_TEST_WAIT_NAME"))); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	fmt.Println("SENT")
	select {} // until killed
}
