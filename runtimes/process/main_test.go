package process

import (
	"os"
	"testing"
)

// TestMain lets this test binary run as the reaper, as the Runtime Server
// binary does.
func TestMain(m *testing.M) {
	Init()
	if mode := os.Getenv(envGuardChild); mode != "" {
		os.Exit(guardChild(mode))
	}
	os.Exit(m.Run())
}
