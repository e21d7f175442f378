package ui

// Generators and measurements, run by hand (they skip unless asked for):
// the screenshot in docs/ui.md, and the page with 100,000 held locks.

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestWriteScreenshot writes a screenshot of the page with a few queues to
// $ETCDLOCK_UI_SCREENSHOT (docs/ui.png, shown in docs/ui.md).
func TestWriteScreenshot(t *testing.T) {
	path := os.Getenv("ETCDLOCK_UI_SCREENSHOT")
	if path == "" {
		t.Skip("set ETCDLOCK_UI_SCREENSHOT=$PWD/docs/ui.png (from the repository root) to write the screenshot in docs/ui.md")
	}
	b := browser(t)
	cli := cluster.TestClient(t)
	p := "demo/"
	ctx := embedtest.Context(t, long)
	_, hs := startUI(t, cli, Config{Prefix: p, AllowBreak: true})
	st := openStream(t, hs)
	_ = st
	lock(t, cli, p+"billing/nightly", "cron@billing-1")
	for _, who := range []string{"cron@billing-2", "cron@billing-3"} {
		s := locktest.OpenSession(t, cli, etcdlock.WithIdentity(who))
		go func() { _, _ = etcdlock.NewMutex(s, p+"billing/nightly").Lock(ctx) }()
		time.Sleep(150 * time.Millisecond) // an order to show, not a synchronisation
	}
	for _, who := range []string{"worker-a", "worker-b", "worker-c"} {
		s := locktest.OpenSession(t, cli, etcdlock.WithIdentity(who))
		go func() { _, _ = etcdlock.NewSemaphore(s, p+"exports/pool", 2).Acquire(ctx) }()
	}
	if _, err := etcdlock.NewElection(locktest.OpenSession(t, cli, etcdlock.WithIdentity("reports-7f9c")), p+"reports/leader").Campaign(ctx, "10.0.3.17:8080"); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = etcdlock.NewElection(locktest.OpenSession(t, cli, etcdlock.WithIdentity("reports-2b41")), p+"reports/leader").Campaign(ctx, "10.0.3.18:8080")
	}()
	for i := 0; i < 8; i++ {
		l := lock(t, cli, fmt.Sprintf("%sshards/%02d", p, i), fmt.Sprintf("consumer-%d", i%3))
		if i%2 == 0 {
			_ = l.Unlock(ctx)
			lock(t, cli, fmt.Sprintf("%sshards/%02d", p, i), fmt.Sprintf("consumer-%d", (i+1)%3))
		}
	}
	waitLocks(t, hs, "", "the scene", func(l locksJSON) bool { return l.Names == 11 && len(l.Locks[0].Waiters) == 2 })
	run(t, b, long, "the page", chromedp.Navigate(hs.URL), chromedp.WaitVisible(css(`tr[data-name="demo/shards/07"]`)),
		chromedp.Sleep(2500*time.Millisecond)) // the chart's next refresh
	png := get(t, b, long, "the screenshot", chromedp.FullScreenshot(100))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestScale100k measures the page with 100,000 held locks
// (ETCDLOCK_UI_SCALE=1): the server's heap for its view, and the time to
// the first rows in the browser.
func TestScale100k(t *testing.T) {
	if os.Getenv("ETCDLOCK_UI_SCALE") == "" {
		t.Skip("set ETCDLOCK_UI_SCALE=1 to measure the page with 100,000 held locks (a few minutes)")
	}
	b := browser(t)
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	const n = 100000
	start := time.Now()
	holdMany(t, cli, p, n)
	t.Logf("%d locks held in %v", n, time.Since(start).Round(time.Millisecond))
	before := heap()
	srv, hs := startUI(t, cli, Config{Prefix: p})
	start = time.Now()
	waitLocks(t, hs, "?limit=1", "the first read", func(l locksJSON) bool { return l.Names == n })
	t.Logf("the view read %d locks in %v", n, time.Since(start).Round(time.Millisecond))
	after := heap()
	t.Logf("heap: %.1f MiB before the view, %.1f MiB with it: %.0f bytes a lock", mib(before), mib(after), float64(after-before)/n)
	_ = srv
	start = time.Now()
	first := css(fmt.Sprintf(`tr[data-name=%q]`, p+"n-00000"))
	run(t, b, time.Minute, "the first page", chromedp.Navigate(hs.URL), chromedp.WaitVisible(first))
	t.Logf("first rows painted %v after navigation", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	run(t, b, time.Minute, "filter", chromedp.SendKeys(css("#filter"), "n-99999"),
		chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-name=%q]`, p+"n-99999"))), chromedp.WaitNotPresent(first))
	t.Logf("filtered to one row in %v", time.Since(start).Round(time.Millisecond))
	_ = context.Background
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
