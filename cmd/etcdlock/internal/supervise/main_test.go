package supervise

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the supervisor process that Start
// runs (this executable, re-run).
func TestMain(m *testing.M) {
	RunSubreaper()
	os.Exit(m.Run())
}
