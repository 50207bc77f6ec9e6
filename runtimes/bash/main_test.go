package bash

import (
	"os"
	"testing"

	"kruntimes.io/kruntimes/runtimes/process"
)

// TestMain lets this test binary run as the process reaper, as the Runtime
// Server binary does, so tests start programs the way production does.
func TestMain(m *testing.M) {
	process.Init()
	os.Exit(m.Run())
}
