package safety

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

var summaryMu sync.Mutex

// summarize logs a summary line and, when ETCDLOCK_SAFETY_SUMMARY names a
// file, appends it there too: go test shows a passing test's log only with
// -v, and CI prints that file so every run shows its counts.
func summarize(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	path := os.Getenv("ETCDLOCK_SAFETY_SUMMARY")
	if path == "" {
		return
	}
	summaryMu.Lock()
	defer summaryMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("summary file: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		t.Errorf("summary file: %v", err)
	}
}
