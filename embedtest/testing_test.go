package embedtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

func TestContextEndsWithTheTest(t *testing.T) {
	var ctx context.Context
	t.Run("sub", func(t *testing.T) {
		ctx = embedtest.Context(t, time.Hour)
		if err := ctx.Err(); err != nil {
			t.Fatalf("Context ended during its test: %v", err)
		}
	})
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("Context after its test: %v, want context.Canceled", ctx.Err())
	}
}

func TestContextEndsAfterD(t *testing.T) {
	ctx := embedtest.Context(t, time.Millisecond)
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Context after d: %v, want context.DeadlineExceeded", ctx.Err())
	}
}

func TestUniqueName(t *testing.T) {
	t.Run("a/b", func(t *testing.T) {
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		if a == b {
			t.Fatalf("UniqueName returned %q twice", a)
		}
		if want := "test/TestUniqueName.a.b/"; !strings.HasPrefix(a, want) {
			t.Fatalf("UniqueName = %q, want it to start with %q", a, want)
		}
	})
}
