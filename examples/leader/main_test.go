package main

import "testing"

// TestLeaderExample runs the example end to end.
func TestLeaderExample(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
