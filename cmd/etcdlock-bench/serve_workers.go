package main

// The serve scenario's workers (serve.go).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
)

// streamContestant holds by stream: per worker, a kept connection for the
// hold and one for its release.
func (p *serveProc) streamContestant() contestant {
	cpuOf["serve-stream"] = p.cpu
	return contestant{name: "serve-stream", setup: func(context.Context, *clientv3.Client) (func(string, int) worker, func(), error) {
		var ws []*streamWorker
		return func(lock string, _ int) worker {
				body, _ := json.Marshal(map[string]any{"name": "bench/" + lock, "ttl": "10s"})
				w := &streamWorker{hold: newHTTPConn(p.base), del: newHTTPConn(p.base), body: body, lines: bufio.NewReader(nil)}
				ws = append(ws, w)
				return w
			}, func() {
				for _, w := range ws {
					w.hold.drop()
					w.del.drop()
				}
			}, nil
	}}
}

type streamWorker struct {
	hold, del *httpConn
	body      []byte
	lines     *bufio.Reader // the held stream's body
	id        string        // the held stream's hold id
}

// acquire holds until the granted line; ctx bounds only the wait: the
// hold's stream outlives it once granted (a round's end must not end a
// held stream, which would release it before release's DELETE).
func (w *streamWorker) acquire(ctx context.Context) error {
	resp, err := w.hold.do(ctx, "POST", "/v1/hold", w.body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		err := errStatus(resp)
		w.hold.drop()
		return fmt.Errorf("hold: %w", err)
	}
	w.lines.Reset(resp.Body)
	line, err := w.lines.ReadSlice('\n')
	var first struct{ Event, Hold string }
	if err != nil || json.Unmarshal(line, &first) != nil || first.Event != "granted" {
		w.hold.drop()
		return fmt.Errorf("hold: %q %v", line, err)
	}
	w.id = first.Hold
	return nil
}

// release releases with DELETE, then reads the stream to its end, so that
// its connection carries the next hold.
func (w *streamWorker) release(ctx context.Context) error {
	if _, err := w.del.call(ctx, "DELETE", "/v1/holds/"+w.id, nil); err != nil {
		w.hold.drop()
		return err
	}
	if _, err := io.Copy(io.Discard, w.lines); err != nil {
		w.hold.drop()
		return err
	}
	return nil
}

// sessionContestant holds by session: one session per worker.
func (p *serveProc) sessionContestant() contestant {
	cpuOf["serve-session"] = p.cpu
	return contestant{name: "serve-session", setup: func(ctx context.Context, _ *clientv3.Client) (func(string, int) worker, func(), error) {
		var ws []*sessionWorker
		return func(lock string, _ int) worker {
				w := &sessionWorker{c: newHTTPConn(p.base), name: "bench/" + lock}
				b, err := w.c.call(ctx, "POST", "/v1/sessions", []byte(`{"ttl":"10s"}`))
				var s struct{ Session string }
				if err == nil {
					err = json.Unmarshal(b, &s)
				}
				if err != nil {
					return errWorker{err}
				}
				w.path = "/v1/sessions/" + s.Session
				ws = append(ws, w)
				return w
			}, func() {
				for _, w := range ws {
					_, _ = w.c.call(context.Background(), "DELETE", w.path, nil)
					w.c.drop()
				}
			}, nil
	}}
}

type sessionWorker struct {
	c     *httpConn
	path  string
	name  string
	token string
}

func (w *sessionWorker) acquire(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"name": w.name, "wait": "1m"})
	b, err := w.c.call(ctx, "POST", w.path+"/lock", body)
	if err != nil {
		return err
	}
	var g struct{ Token string }
	if err := json.Unmarshal(b, &g); err != nil {
		return err
	}
	w.token = g.Token
	return nil
}

func (w *sessionWorker) release(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"name": w.name, "token": w.token})
	_, err := w.c.call(ctx, "POST", w.path+"/unlock", body)
	return err
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
