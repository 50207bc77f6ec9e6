package e2e

import (
	"os"
	"testing"

	"kruntimes.io/kruntimes/test/e2e/framework"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m))
}
