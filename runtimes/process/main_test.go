package process

import (
	"os"
	"testing"
)

// TestMain lets this test binary run as the reaper, as the Runtime Server
// binary does.
func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}
