package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultSourceFile is the file inline source is written to when the Run
// does not name one in source.inlinePath.
const DefaultSourceFile = "script"

// markerDir holds one empty file per workspace runtimed created, named by
// the Run UID. The sweep removes only directories with a marker: the
// workspace volume may be the user's, with data runtimed must never touch.
const markerDir = ".kruntimes-workspaces"

// Root is the workspace directory shared with the Runtime Server; both
// containers mount it at the same path, so a path runtimed builds is valid
// for the Runtime Server as well.
type Root string

// RunDir is the directory of one Run.
func (r Root) RunDir(uid types.UID) string {
	return filepath.Join(string(r), string(uid))
}

// Materialize writes inline source for the Run uid and returns the Run's
// directory and the absolute path of the source file (empty when there is
// no inline source). It is idempotent, so a re-tried claim rewrites the same
// file.
func (r Root) Materialize(uid types.UID, inline, inlinePath string) (dir, source string, err error) {
	if uid == "" || !filepath.IsLocal(string(uid)) {
		return "", "", fmt.Errorf("run UID %q cannot name a workspace directory", uid)
	}
	dir = r.RunDir(uid)
	// The marker comes first, so a crash between the two leaves a marker
	// without a directory (which the sweep tidies), never a directory
	// nobody claims.
	if err := os.MkdirAll(filepath.Join(string(r), markerDir), 0o755); err != nil {
		return "", "", fmt.Errorf("create %s in the workspace: %w; check that the workspace volume is writable", markerDir, err)
	}
	if err := os.WriteFile(r.marker(uid), nil, 0o644); err != nil {
		return "", "", fmt.Errorf("mark the Run's workspace: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("create the Run's workspace %s: %w; check that the workspace volume is writable", dir, err)
	}
	if inline == "" {
		return dir, "", nil
	}
	name := inlinePath
	if name == "" {
		name = DefaultSourceFile
	}
	// The API validates inlinePath as a relative clean path; checking again
	// keeps a bad object from writing outside the Run's directory.
	if !filepath.IsLocal(name) {
		return "", "", fmt.Errorf("source.inlinePath %q must be a relative path inside the workspace", inlinePath)
	}
	source = filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(source), 0o755); err != nil {
		return "", "", fmt.Errorf("create the directory of %s: %w", source, err)
	}
	// Executable, so an entrypoint may run the source directly as well as
	// through the interpreter.
	if err := os.WriteFile(source, []byte(inline), 0o755); err != nil {
		return "", "", fmt.Errorf("write inline source to %s: %w", source, err)
	}
	return dir, source, nil
}

func (r Root) marker(uid types.UID) string {
	return filepath.Join(string(r), markerDir, string(uid))
}

// Remove deletes the Run's directory and its marker; removing an absent one
// succeeds. What the program made unwritable (chmod a-w on a directory) is
// made writable and removed; what cannot be removed at all (a busy mount
// point) is an error, and the marker stays so that a later sweep tries again.
func (r Root) Remove(uid types.UID) error {
	if uid == "" || !filepath.IsLocal(string(uid)) {
		return fmt.Errorf("run UID %q cannot name a workspace directory", uid)
	}
	dir := r.RunDir(uid)
	if err := os.RemoveAll(dir); err != nil {
		makeWritable(dir)
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove the workspace of Run %s: %w", uid, err)
		}
	}
	if err := os.Remove(r.marker(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the workspace marker of Run %s: %w", uid, err)
	}
	return nil
}

// makeWritable gives the owner write and search permission on every
// directory under dir, so that RemoveAll can unlink their entries. It does
// not follow symlinks.
func makeWritable(dir string) {
	// WalkDir visits a directory before reading it, so a directory made
	// unreadable is fixed before its entries are needed.
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fs.SkipDir // still unreadable: RemoveAll reports it
		}
		if d.IsDir() {
			if info, err := d.Info(); err == nil {
				_ = os.Chmod(path, info.Mode().Perm()|0o700)
			}
		}
		return nil
	})
}

// Sweep removes the workspace of every Run that keep does not name and that
// runtimed created (it has a marker), e.g. one left by a runtimed that
// stopped before it cleaned up, or one that could not be removed then; it
// returns the UIDs it removed. Anything else under the root is left alone.
// It reads the markers before calling keep, so a Run whose workspace is
// created meanwhile is never swept.
func (r Root) Sweep(keep func(types.UID) bool) (removed []types.UID, err error) {
	entries, err := os.ReadDir(filepath.Join(string(r), markerDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the workspace markers in %s: %w", r, err)
	}
	var errs []error
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.Type().IsRegular() || keep(uid) {
			continue
		}
		if err := r.Remove(uid); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, uid)
	}
	return removed, errors.Join(errs...)
}
