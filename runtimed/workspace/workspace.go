package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultSourceFile is the file inline source is written to when the Run
// does not name one in source.inlinePath.
const DefaultSourceFile = "script"

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

// Remove deletes the Run's directory; removing an absent one succeeds.
func (r Root) Remove(uid types.UID) error {
	if uid == "" || !filepath.IsLocal(string(uid)) {
		return fmt.Errorf("run UID %q cannot name a workspace directory", uid)
	}
	if err := os.RemoveAll(r.RunDir(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the workspace of Run %s: %w", uid, err)
	}
	return nil
}

// Sweep removes the directory of every Run that keep does not name, e.g. one
// left by a runtimed that stopped before it cleaned up; it returns the UIDs
// it removed. It reads the directories before calling keep, so a Run whose
// directory is created meanwhile is never swept.
func (r Root) Sweep(keep func(types.UID) bool) (removed []types.UID, err error) {
	entries, err := os.ReadDir(string(r))
	if err != nil {
		return nil, fmt.Errorf("read the workspace %s: %w", r, err)
	}
	var errs []error
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || keep(uid) {
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
