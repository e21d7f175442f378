package main

import (
	"context"
	"testing"
)

// TestLeaderExample runs the example end to end.
func TestLeaderExample(t *testing.T) {
	if err := run(context.Background()); err != nil {
		t.Fatal(err)
	}
}
