//go:build race

package main

// raceEnabled: the test binary runs under the race detector, so the CLI is
// built with it too.
const raceEnabled = true
