//go:build linux

package safety

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(runWorker(role))
	}
	os.Exit(m.Run())
}
