package safety

// This file holds the resources a worker increments: the register over
// HTTP and the counter in etcd.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
)

// httpRegister is the client of a Register.
type httpRegister struct {
	url string
	c   *http.Client
}

func (r *httpRegister) do(ctx context.Context, method string, tok etcdlock.Token, body string, shared bool) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set(etcdlock.TokenHeader, tok.String())
	if shared {
		req.Header.Set(SharedHeader, "1")
	}
	resp, err := r.c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (r *httpRegister) read(ctx context.Context, l guarded) (int64, string) {
	return r.get(ctx, l, false)
}

// readShared is read under a shared grant (SharedHeader).
func (r *httpRegister) readShared(ctx context.Context, l guarded) (int64, string) {
	return r.get(ctx, l, true)
}

func (r *httpRegister) get(ctx context.Context, l guarded, shared bool) (int64, string) {
	code, body, err := r.do(ctx, http.MethodGet, l.Token(), "", shared)
	switch {
	case err != nil:
		return 0, "err"
	case code == http.StatusConflict:
		return 0, "stale"
	case code != http.StatusOK:
		return 0, "err"
	}
	v, err := strconv.ParseInt(body, 10, 64)
	if err != nil {
		return 0, "err"
	}
	return v, "ok"
}

func (r *httpRegister) write(ctx context.Context, l guarded, v int64) string {
	code, _, err := r.do(ctx, http.MethodPut, l.Token(), strconv.FormatInt(v, 10), false)
	switch {
	case err != nil:
		return "unknown"
	case code == http.StatusNoContent:
		return "ok"
	case code == http.StatusConflict:
		return "stale"
	}
	return "unknown"
}

// etcdCounter is a counter kept in etcd at key, as "<value> <token>"; every
// read and write is a Txn guarded by the grant.
type etcdCounter struct {
	cli *clientv3.Client
	key string
}

// parseCounter parses a counter value "<value> <token>" ("" is 0).
func parseCounter(b []byte) (v int64, tok etcdlock.Token, err error) {
	if len(b) == 0 {
		return 0, 0, nil
	}
	vs, ts, ok := strings.Cut(string(b), " ")
	if !ok {
		return 0, 0, fmt.Errorf("counter value %q", b)
	}
	if v, err = strconv.ParseInt(vs, 10, 64); err != nil {
		return 0, 0, err
	}
	tok, err = etcdlock.ParseToken(ts)
	return v, tok, err
}

func (c *etcdCounter) read(ctx context.Context, l guarded) (int64, string) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := c.cli.Txn(ctx).If(l.Guard()).Then(clientv3.OpGet(c.key)).Commit()
	switch {
	case err != nil:
		return 0, "err"
	case !resp.Succeeded:
		return 0, "stale"
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return 0, "ok"
	}
	v, _, err := parseCounter(kvs[0].Value)
	if err != nil {
		return 0, "err"
	}
	return v, "ok"
}

func (c *etcdCounter) write(ctx context.Context, l guarded, v int64) string {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := c.cli.Txn(ctx).If(l.Guard()).
		Then(clientv3.OpPut(c.key, fmt.Sprintf("%d %d", v, l.Token()))).Commit()
	switch {
	case err != nil:
		return "unknown"
	case !resp.Succeeded:
		return "stale"
	}
	return "ok"
}
