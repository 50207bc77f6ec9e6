package repobin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Command is a main package of this repository and the binary it builds.
type Command struct {
	// Name is the binary's file name in bin/.
	Name string
	// Package is the package directory relative to the repository root,
	// such as ./cmd/runtimed.
	Package string
	// NoRace builds it without -race even in a race-built suite, for a
	// short-lived helper: a race-built binary sleeps 1 s before it exits
	// (GORACE atexit_sleep_ms), which its callers would wait out each time.
	NoRace bool
}

// Tags are the build tags of every kruntimes binary, the Makefile's GO_TAGS:
// fieldsv1string keeps managedFields as interned strings
// (k8s.io/apimachinery), so the watch cache holds one copy of the field
// sets identical Runs share instead of one per Run.
const Tags = "fieldsv1string"

// APIServer is kruntimes-apiserver with the controllers it hosts.
var APIServer = Command{Name: "kruntimes-apiserver", Package: "./cmd/kruntimes-apiserver"}

// Controllers is kruntimes-controllers, the controllers apart from the
// apiserver (the chart's default).
var Controllers = Command{Name: "kruntimes-controllers", Package: "./cmd/kruntimes-controllers"}

// Path is where Build puts the binary called name.
func Path(repoRoot, name string) string { return filepath.Join(repoRoot, "bin", name) }

// Build builds each command into bin/<name>, with -race when RaceEnabled.
// go build leaves a binary whose inputs did not change alone, so a second
// call only checks. A lock on bin/ serializes builds, because go test runs
// the test binaries of several packages at once and two of them may build
// the same command. Every command is attempted; the error names each that
// failed, so a caller never runs a stale binary left from an earlier build.
func Build(ctx context.Context, repoRoot string, commands ...Command) error {
	binDir := filepath.Join(repoRoot, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	unlock, err := lock(filepath.Join(binDir, ".repobin.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, c := range commands {
		if err := build(ctx, repoRoot, c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func build(ctx context.Context, repoRoot string, c Command) error {
	args := []string{"build", "-tags", Tags}
	if RaceEnabled && !c.NoRace {
		args = append(args, "-race")
	}
	args = append(args, "-o", Path(repoRoot, c.Name), c.Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("building bin/%s: go %s: %w\n%s", c.Name, strings.Join(args, " "), err, firstLines(string(out), 15))
	}
	return nil
}

// lock takes an exclusive flock on path, waiting for any other holder.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// RepoRoot finds the repository root from dir by looking for go.mod of the
// kruntimes module, so no machine path is ever configured.
func RepoRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(data)), "module kruntimes.io/kruntimes\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no kruntimes.io/kruntimes go.mod above %s", dir)
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}
