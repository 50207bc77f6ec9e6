package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// versionPackage is the package whose variables the linker stamps.
const versionPackage = "kruntimes.io/kruntimes/version"

// buildTags are the Makefile's GO_TAGS: every kruntimes binary is built with
// them (fieldsv1string keeps identical managedFields once in the watch cache).
const buildTags = "fieldsv1string"

// revision is the commit the images are built from.
type revision struct {
	// Commit is HEAD's full hash.
	Commit string
	// Time is HEAD's commit time, or $SOURCE_DATE_EPOCH: every timestamp
	// in the images.
	Time time.Time
	// Dirty says tracked files differ from HEAD.
	Dirty bool
}

// readRevision reads HEAD of the repository at dir.
func readRevision(ctx context.Context, dir string) (revision, error) {
	var rev revision
	out, err := git(ctx, dir, "show", "-s", "--format=%H %ct", "HEAD")
	if err != nil {
		return rev, err
	}
	commit, seconds, ok := strings.Cut(strings.TrimSpace(out), " ")
	unix, err := strconv.ParseInt(seconds, 10, 64)
	if !ok || err != nil {
		return rev, fmt.Errorf("unexpected git show output %q", out)
	}
	rev.Commit, rev.Time = commit, time.Unix(unix, 0).UTC()
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		unix, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return rev, fmt.Errorf("SOURCE_DATE_EPOCH must be seconds since 1970, got %q", epoch)
		}
		rev.Time = time.Unix(unix, 0).UTC()
	}
	status, err := git(ctx, dir, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return rev, err
	}
	rev.Dirty = strings.TrimSpace(status) != ""
	return rev, nil
}

// pseudoVersion names a build between releases as Go names a commit without
// a tag, v0.0.0-<UTC commit time>-<12 hex digits>, so that tags sort by
// time; -dirty marks a tree with changes to tracked files.
func (r revision) pseudoVersion() string {
	v := "v0.0.0-" + r.Time.Format("20060102150405") + "-" + r.Commit[:min(12, len(r.Commit))]
	if r.Dirty {
		v += "-dirty"
	}
	return v
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// buildBinaries builds the named commands (./cmd/<name>) as static linux
// binaries into binDir with one go build, which skips any binary already
// up to date there.
func buildBinaries(ctx context.Context, repoRoot, binDir, arch, version, commit string, names []string) error {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	args := goBuildArgs(binDir, version, commit)
	for _, name := range names {
		args = append(args, "./cmd/"+name)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return fmt.Errorf("go build left no %s: %w", name, err)
		}
	}
	return nil
}

// goBuildArgs are the go build arguments of every image binary, the
// Dockerfiles' too: no paths of this machine (-trimpath), no VCS stamp (the
// commit comes through -X, and a stamp would differ between a checkout and
// a tarball of it), no symbol table or DWARF (-s -w: a third of the size;
// panics still print file:line).
func goBuildArgs(binDir, version, commit string) []string {
	ldflags := fmt.Sprintf("-s -w -X %s.gitVersion=%s -X %s.gitCommit=%s", versionPackage, version, versionPackage, commit)
	return []string{"build", "-trimpath", "-buildvcs=false", "-tags", buildTags, "-ldflags", ldflags, "-o", binDir + string(filepath.Separator)}
}
