package serve

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestAttackServeSharedIdleRace: with SharedIdle 1 ms the idle close races
// every new use of the TTL's session; no hold, campaign or leader read
// may get a closed session.
func TestAttackServeSharedIdleRace(t *testing.T) {
	addr := sharedServer(t, Config{SharedIdle: time.Millisecond})
	race := embedtest.UniqueName(t, "race") // names race/<test>/<n>/<i>
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= 400; i = next.Add(1) {
				var resp *http.Response
				var err error
				switch i % 3 {
				case 0:
					resp, err = c.Get(fmt.Sprintf("http://%s/v1/leader?name=%s/%d", addr, url.QueryEscape(race), i))
				case 1:
					resp, err = c.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(fmt.Sprintf(`{"name":"%s/%d","ttl":"10s"}`, race, i)))
				default:
					resp, err = c.Post("http://"+addr+"/v1/campaign", "application/json", strings.NewReader(fmt.Sprintf(`{"name":"%s/%d","ttl":"10s","value":"v"}`, race, i)))
				}
				if err != nil {
					t.Error(err)
					failed.Add(1)
					continue
				}
				line, _ := bufio.NewReader(resp.Body).ReadString('\n')
				if resp.StatusCode != http.StatusOK || strings.Contains(line, "lost") || strings.Contains(line, "closed") {
					t.Errorf("request %d: %s %q", i, resp.Status, line)
					failed.Add(1)
				}
				if i%3 != 0 {
					time.Sleep(time.Duration(i%5) * time.Millisecond)
				}
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 0))
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 400 requests failed", n)
	}
}
