package realnode

import (
	"os"
	"syscall"
	"testing"
)

// Env makes the real-node tests run (and fail without root); under
// KRUNTIMES_E2E_REQUIRE=1, as make test sets, they run whenever the test
// binary is root.
const Env = "KRUNTIMES_E2E_REALNODE"

// testsLockPath serializes real-node tests of different packages, which go
// test runs in parallel: only one real node runs per machine.
const testsLockPath = "/run/kruntimes-realnode-tests.lock"

// RequireForTest skips t unless a real node can run (root) and is asked for
// (Env, or KRUNTIMES_E2E_REQUIRE=1), then waits until no other real-node
// test runs on the machine and holds that until t ends.
func RequireForTest(t testing.TB) {
	t.Helper()
	asked := os.Getenv(Env) == "1"
	if !asked && os.Getenv("KRUNTIMES_E2E_REQUIRE") != "1" {
		t.Skipf("set %s=1 (or KRUNTIMES_E2E_REQUIRE=1, as make test does) to run the real node: root and hack/build-node.sh", Env)
	}
	if os.Geteuid() != 0 {
		if asked {
			t.Fatalf("%s=1 but the real node needs root", Env)
		}
		t.Skip("the real node needs root: make test runs it only as root")
	}
	f, err := os.OpenFile(testsLockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("opening the real-node tests' lock: %v", err)
	}
	t.Logf("waiting for other real-node tests on this machine (%s)", testsLockPath)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("locking %s: %v", testsLockPath, err)
	}
	t.Cleanup(func() { f.Close() })
}
