package main

// The serve scenario's workers (serve.go).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
)

// streamContestant holds by stream: one kept HTTP client per worker.
func (p *serveProc) streamContestant() contestant {
	cpuOf["serve-stream"] = p.cpu
	return contestant{name: "serve-stream", setup: func(context.Context, *clientv3.Client) (func(string, int) worker, func(), error) {
		var clients []*http.Client
		return func(lock string, _ int) worker {
				c := keptClient()
				clients = append(clients, c)
				body, _ := json.Marshal(map[string]any{"name": "bench/" + lock, "ttl": "10s"})
				return &streamWorker{c: c, base: p.base, body: body}
			}, func() {
				for _, c := range clients {
					c.CloseIdleConnections()
				}
			}, nil
	}}
}

type streamWorker struct {
	c      *http.Client
	base   string
	body   []byte
	resp   *http.Response // the held stream
	hold   string
	cancel context.CancelFunc // ends resp's request
}

// acquire holds until the granted line; ctx bounds only the wait: the
// hold's request outlives it once granted (a round's end must not end a
// held stream, which would release it before release's DELETE).
func (w *streamWorker) acquire(ctx context.Context) error {
	hctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	req, err := http.NewRequestWithContext(hctx, "POST", w.base+"/v1/hold", bytes.NewReader(w.body))
	if err != nil {
		cancel()
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.c.Do(req)
	if err != nil {
		cancel()
		return err
	}
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	var first struct {
		Event, Hold string
	}
	if err != nil || json.Unmarshal(line, &first) != nil || first.Event != "granted" || !stop() {
		resp.Body.Close()
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("hold: %d %q %v", resp.StatusCode, line, err)
	}
	w.resp, w.hold, w.cancel = resp, first.Hold, cancel
	return nil
}

// release releases with DELETE, then reads the stream to its end, so that
// its connection carries the next hold.
func (w *streamWorker) release(ctx context.Context) error {
	defer w.cancel()
	defer w.resp.Body.Close()
	if err := post(ctx, w.c, "DELETE", w.base+"/v1/holds/"+w.hold, nil, nil); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, w.resp.Body)
	return err
}

// sessionContestant holds by session: one session per worker.
func (p *serveProc) sessionContestant() contestant {
	cpuOf["serve-session"] = p.cpu
	return contestant{name: "serve-session", setup: func(ctx context.Context, _ *clientv3.Client) (func(string, int) worker, func(), error) {
		var ws []*sessionWorker
		return func(lock string, _ int) worker {
				w := &sessionWorker{c: keptClient(), name: "bench/" + lock}
				var s struct{ Session string }
				if err := post(ctx, w.c, "POST", p.base+"/v1/sessions", map[string]any{"ttl": "10s"}, &s); err != nil {
					return errWorker{err}
				}
				w.url = p.base + "/v1/sessions/" + s.Session
				ws = append(ws, w)
				return w
			}, func() {
				for _, w := range ws {
					_ = post(context.Background(), w.c, "DELETE", w.url, nil, nil)
					w.c.CloseIdleConnections()
				}
			}, nil
	}}
}

type sessionWorker struct {
	c     *http.Client
	url   string
	name  string
	token string
}

func (w *sessionWorker) acquire(ctx context.Context) error {
	var g struct{ Token string }
	if err := post(ctx, w.c, "POST", w.url+"/lock", map[string]any{"name": w.name, "wait": "1m"}, &g); err != nil {
		return err
	}
	w.token = g.Token
	return nil
}

func (w *sessionWorker) release(ctx context.Context) error {
	return post(ctx, w.c, "POST", w.url+"/unlock", map[string]any{"name": w.name, "token": w.token}, nil)
}

// v3lockContestant is etcd's v3lock service: Lock and Unlock on a lease
// of the worker's (kept alive), the name under "bench-v3lock/".
var v3lockContestant = contestant{name: "v3lock", setup: func(ctx context.Context, cli *clientv3.Client) (func(string, int) worker, func(), error) {
	var leases []clientv3.LeaseID
	lc := v3lockpb.NewLockClient(cli.ActiveConnection())
	return func(lock string, _ int) worker {
			lease, err := cli.Grant(ctx, 10)
			if err != nil {
				return errWorker{err}
			}
			ka, err := cli.KeepAlive(context.Background(), lease.ID)
			if err != nil {
				return errWorker{err}
			}
			go func() {
				for range ka {
				}
			}()
			leases = append(leases, lease.ID)
			return &v3lockWorker{lc: lc, name: []byte("bench-v3lock/" + lock), lease: int64(lease.ID)}
		}, func() {
			for _, l := range leases {
				_, _ = cli.Revoke(context.Background(), l)
			}
		}, nil
}}

type v3lockWorker struct {
	lc    v3lockpb.LockClient
	name  []byte
	lease int64
	key   []byte
}

func (w *v3lockWorker) acquire(ctx context.Context) error {
	resp, err := w.lc.Lock(ctx, &v3lockpb.LockRequest{Name: w.name, Lease: w.lease})
	if err != nil {
		return err
	}
	w.key = resp.Key
	return nil
}

func (w *v3lockWorker) release(ctx context.Context) error {
	_, err := w.lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: w.key})
	return err
}
