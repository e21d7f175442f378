package ui

// Browser tests: the real page in a real headless Chromium (Debian's
// chromium package), driven by chromedp, against a real etcd member.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// chromium returns the path of a Chromium, or skips the test with the
// reason.
func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium in $PATH (apt-get install chromium): browser tests skipped")
	return ""
}

// browser returns a chromedp context of a fresh headless Chromium, closed
// at cleanup.
func browser(t testing.TB) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		acancel()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs steps in the browser, failing the test after d.
func run(t testing.TB, bctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that returns a value, failing the test after d.
func get[T any](t testing.TB, bctx context.Context, d time.Duration, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, d)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// textUntil returns the text of sel once it contains want, or its last
// text after long: a row can be visible a moment before the render that
// fills it (seen once on a busy machine).
func textUntil(t testing.TB, bctx context.Context, sel, want string) string {
	t.Helper()
	deadline := time.Now().Add(long)
	for {
		text := get(t, bctx, long, "the text of "+sel, chromedp.Text(css(sel)))
		if strings.Contains(text, want) || time.Now().After(deadline) {
			return text
		}
		time.Sleep(20 * time.Millisecond) // polling the page: it says nothing when it renders
	}
}

// holderSel and waiterSel select a holder's or a waiter's entry of name.
func holderSel(name string, token etcdlock.Token) string {
	return fmt.Sprintf(`tr[data-name=%q] .holder[data-token="%d"]`, name, token)
}

func waiterSel(name string, token etcdlock.Token) string {
	return fmt.Sprintf(`tr[data-name=%q] .waiter[data-token="%d"]`, name, token)
}

// TestBrowserQueue: the page shows a held lock with its token and
// identity; a new waiter appears within 2 s of its Lock call; a release
// moves the waiter to holder.
func TestBrowserQueue(t *testing.T) {
	b := browser(t)
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	_, hs := startUI(t, cli, Config{Prefix: p})
	name := p + "billing/nightly"
	held := lock(t, cli, name, "alice@host-1")
	run(t, b, long, "the holder on the page", chromedp.Navigate(hs.URL),
		chromedp.WaitVisible(css(holderSel(name, held.Token()))))
	text := textUntil(t, b, holderSel(name, held.Token()), "alice@host-1")
	if !strings.Contains(text, "alice@host-1") || !strings.Contains(text, "#"+held.Token().String()) {
		t.Fatalf("holder shows %q, want alice@host-1 and #%d", text, held.Token())
	}
	s := locktest.OpenSession(t, cli, etcdlock.WithIdentity("bob@host-2"))
	m := etcdlock.NewMutex(s, name)
	var (
		wg      sync.WaitGroup
		granted *etcdlock.Lock
		lockErr error
	)
	wg.Add(1)
	called := time.Now()
	go func() {
		defer wg.Done()
		granted, lockErr = m.Lock(embedtest.Context(t, long))
	}()
	// The waiter's token is its key's create revision: find it on the page.
	run(t, b, 2*time.Second, "the waiter within 2 s of its Lock call",
		chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-name=%q] .waiter`, name))))
	t.Logf("the waiter showed %v after its Lock call", time.Since(called).Round(time.Millisecond))
	if err := held.Unlock(embedtest.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if lockErr != nil {
		t.Fatal(lockErr)
	}
	run(t, b, long, "the waiter moved to holder", chromedp.WaitVisible(css(holderSel(name, granted.Token()))),
		chromedp.WaitNotPresent(css(waiterSel(name, granted.Token()))))
	// The holder's line says how long it has held; the chart has its scale.
	text = textUntil(t, b, holderSel(name, granted.Token()), "bob@host-2")
	if !strings.Contains(text, "held ") {
		t.Errorf("holder shows %q, want how long it has held", text)
	}
	axis := get(t, b, long, "the chart's axes", chromedp.Text(css(".axis.x")))
	ymax := get(t, b, long, "the chart's scale", chromedp.Text(css("#ymax")))
	if !strings.Contains(axis, "now") || !strings.Contains(axis, "15 min") || ymax == "" {
		t.Errorf("chart axes %q, scale %q; want time labels and the top value", axis, ymax)
	}
}

// TestBrowserBreak: with --allow-break the Break button asks for
// confirmation, frees a stuck holder (its Lock.Context ends with
// ErrLockLost) and the timeline says "broken".
func TestBrowserBreak(t *testing.T) {
	b := browser(t)
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	_, hs := startUI(t, cli, Config{Prefix: p, AllowBreak: true})
	name := p + "stuck"
	held := lock(t, cli, name, "stuck-job")
	// The page waits for the confirmation, and so does the Click: a
	// goroutine accepts it.
	asked := make(chan string, 1)
	dctx, stopDialogs := context.WithCancel(b)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ev, err := range chromedp.Events(dctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			select {
			case asked <- ev.Message:
			default:
			}
			if _, err := chromedp.Call(dctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		stopDialogs()
		wg.Wait()
	})
	button := css(holderSel(name, held.Token()) + " button.break")
	run(t, b, long, "click Break", chromedp.Navigate(hs.URL), chromedp.WaitVisible(button), chromedp.Click(button))
	select {
	case msg := <-asked:
		if !strings.Contains(msg, "stuck-job") || !strings.Contains(msg, held.Token().String()) {
			t.Errorf("confirmation %q, want the holder and its token", msg)
		}
	case <-time.After(long):
		t.Fatal("no confirmation asked")
	}
	select {
	case <-held.Context().Done():
		if cause := context.Cause(held.Context()); !errors.Is(cause, etcdlock.ErrLockLost) {
			t.Fatalf("the holder's context ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(long):
		t.Fatal("the broken holder's context did not end")
	}
	run(t, b, long, "broken on the timeline", chromedp.WaitVisible(
		css(fmt.Sprintf(`#timeline li[data-kind="broken"][data-token="%d"]`, held.Token()))))
}

// TestBrowserExpired: a SIGKILLed holder's grant disappears after its
// TTL, and the timeline says "expired".
func TestBrowserExpired(t *testing.T) {
	b := browser(t)
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	_, hs := startUI(t, cli, Config{Prefix: p})
	name := p + "crashy"
	holder, token := startHolder(t, name)
	run(t, b, long, "the holder on the page", chromedp.Navigate(hs.URL),
		chromedp.WaitVisible(css(holderSel(name, token))))
	killed := time.Now()
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	run(t, b, long, "expired on the timeline",
		chromedp.WaitVisible(css(fmt.Sprintf(`#timeline li[data-kind="expired"][data-token="%d"]`, token))),
		chromedp.WaitNotPresent(css(holderSel(name, token))))
	t.Logf("expired on the page %v after the SIGKILL (TTL %v)", time.Since(killed).Round(time.Millisecond), holderTTL)
}

// TestBrowserTenThousand: a prefix of 10,000 held locks renders, pages and
// filters.
func TestBrowserTenThousand(t *testing.T) {
	b := browser(t)
	cli := cluster.TestClient(t)
	p := uniquePrefix(t)
	const n = 10000
	holdMany(t, cli, p, n)
	_, hs := startUI(t, cli, Config{Prefix: p})
	waitLocks(t, hs, "", "the first read", func(l locksJSON) bool { return l.Names == n })
	start := time.Now()
	first := css(fmt.Sprintf(`tr[data-name=%q]`, p+"n-00000"))
	run(t, b, long, "the first page", chromedp.Navigate(hs.URL), chromedp.WaitVisible(first))
	t.Logf("first rows painted %v after navigation (%d locks)", time.Since(start).Round(time.Millisecond), n)
	count := get(t, b, long, "the count", chromedp.Text(css("#count")))
	want := p + "n-04242"
	run(t, b, long, "filter", chromedp.SendKeys(css("#filter"), "n-04242"),
		chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-name=%q]`, want))), chromedp.WaitNotPresent(first))
	rows := get(t, b, long, "rows", chromedp.Evaluate[int](`document.querySelectorAll("#locks tbody tr").length`))
	if !strings.Contains(count, "of 10000 names") {
		t.Errorf("count %q, want it to say 10000 names", count)
	}
	if rows != 1 {
		t.Errorf("%d rows after filtering, want 1", rows)
	}
}

// holdMany takes n mutexes named prefix+"n-%05d" on one session, held
// until cleanup.
func holdMany(t testing.TB, cli *clientv3.Client, prefix string, n int) {
	t.Helper()
	s := locktest.OpenSession(t, cli, etcdlock.WithIdentity("many"))
	var wg sync.WaitGroup
	errs := make(chan error, n)
	names := make(chan string, n)
	for i := 0; i < n; i++ {
		names <- fmt.Sprintf("%sn-%05d", prefix, i)
	}
	close(names)
	ctx := embedtest.Context(t, 2*time.Minute)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				if _, err := etcdlock.NewMutex(s, name).Lock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// holderTTL is the TTL of startHolder's session.
const holderTTL = 2 * time.Second

// startHolder starts this test binary as a process that holds name with a
// session of holderTTL, and returns it and the grant's token once it holds.
func startHolder(t testing.TB, name string) (*exec.Cmd, etcdlock.Token) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+name, endpointsEnv+"="+strings.Join(cluster.Endpoints(), ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	buf := make([]byte, 64)
	nr, err := out.Read(buf)
	if err != nil {
		t.Fatalf("holder: %v", err)
	}
	tok, err := strconv.ParseInt(strings.TrimSpace(string(buf[:nr])), 10, 64)
	if err != nil {
		t.Fatalf("holder said %q", buf[:nr])
	}
	return cmd, etcdlock.Token(tok)
}
