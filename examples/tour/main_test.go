package main

import "testing"

// TestTour runs the tour end to end; it fails if any promise it shows breaks.
func TestTour(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
