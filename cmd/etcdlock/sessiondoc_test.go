package main

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestNewSessionWaitsForCtx: NewSession on an endpoint where no etcd is
// returns only when ctx ends, and its doc comment says so and asks for a
// ctx with a deadline.
func TestNewSessionWaitsForCtx(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../session.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "NewSession" {
			doc = oneLine(fn.Doc.Text())
		}
	}
	for _, want := range []string{"as long as ctx allows", "until ctx ends", "retry", "deadline"} {
		if !strings.Contains(doc, want) {
			t.Errorf("NewSession's doc does not say %q: %s", want, doc)
		}
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const wait = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	s, err := etcdlock.NewSession(ctx, cli)
	if err == nil {
		_ = s.Close()
		t.Fatal("NewSession on 127.0.0.1:1 succeeded")
	}
	if took := time.Since(start); took < wait-100*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("NewSession returned %v after %v, want ctx's deadline after %v", err, took, wait)
	}
}
