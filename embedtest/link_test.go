package embedtest_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLinkHold: a Put the client gave up on (deadline exceeded, then the
// client closed) during a Hold is applied after Restore.
func TestLinkHold(t *testing.T) {
	ctx := testContext(t)
	link, err := shared.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	cfg := shared.ClientConfig()
	cfg.Endpoints = link.Endpoints()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	other := client(t, shared.Client)
	r, err := other.Get(ctx, "hold/k")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := other.Watch(wctx, "hold/k", clientv3.WithRev(r.Header.Revision+1))
	if _, err := cli.Get(ctx, "hold/warm"); err != nil { // connected
		t.Fatal(err)
	}

	link.Hold()
	if !link.IsCut() {
		t.Fatal("IsCut() = false after Hold")
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = cli.Put(pctx, "hold/k", "late")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put through a held link = %v, want deadline exceeded", err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	link.Restore()
	select {
	case wr := <-wch:
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		if len(wr.Events) != 1 || string(wr.Events[0].Kv.Value) != "late" {
			t.Fatalf("watch: %v, want the late put", wr.Events)
		}
	case <-ctx.Done():
		t.Fatal("the held Put was not applied after Restore")
	}
}

func TestFlakyClient(t *testing.T) {
	ctx := testContext(t)
	cli, link, err := shared.FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if eps := link.Endpoints(); len(eps) != len(shared.Members()) || slices.Equal(eps, shared.Endpoints()) {
		t.Fatalf("link endpoints %v, cluster endpoints %v", eps, shared.Endpoints())
	}
	if _, err := cli.Put(ctx, "flaky/k", "v"); err != nil {
		t.Fatal(err)
	}

	link.Cut()
	if !link.IsCut() {
		t.Fatal("IsCut() = false after Cut")
	}
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = cli.Get(gctx, "flaky/k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get through a cut link = %v, want deadline exceeded", err)
	}
	// Only this client is cut off.
	other := client(t, shared.Client)
	if _, err := other.Put(ctx, "flaky/k", "w"); err != nil {
		t.Fatal(err)
	}

	link.Restore()
	eventually(t, ctx, "get after Restore", func(ctx context.Context) error {
		r, err := cli.Get(ctx, "flaky/k")
		if err == nil && (len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "w") {
			err = errors.New("wrong value")
		}
		return err
	})

	// Closing the client closes its link.
	addr := link.Endpoints()[0][len("http://"):]
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "link closed with its client", func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil
		}
		conn.Close()
		return errors.New("link still accepts connections")
	})
}
