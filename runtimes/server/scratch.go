package server

import (
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
)

// A Run's programs get a HOME and a TMPDIR of their own, made when it
// starts (a task) or registers (a function) and removed with it: what one
// tenant of the Pod writes to them (a user site-packages directory, a
// usercustomize, a cache) never reaches the next. The Run's own env may
// still name others.

// newScratch makes a directory in the state directory with home and tmp
// in it, and returns it with the variables that point programs there.
func (s *Server) newScratch(prefix string) (dir string, env []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir, err = os.MkdirTemp(s.opts.StateDir, prefix)
	if err != nil {
		return "", nil, err
	}
	env, err = scratchIn(dir)
	if err != nil {
		_ = removeScratch(dir)
		return "", nil, err
	}
	s.scratches[dir] = true
	return dir, env, nil
}

// dropScratch removes a Run's HOME and TMPDIR, and then, if no Run is left,
// sweeps what Runs left elsewhere.
func (s *Server) dropScratch(dir string) error {
	err := removeScratch(dir)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.scratches, dir)
	if s.opts.Sweeper != nil && len(s.scratches) == 0 && len(s.regs) == 0 {
		// Under s.mu: no Run gets a HOME, so none starts, meanwhile.
		if removed := s.opts.Sweeper.Sweep(); len(removed) > 0 {
			klog.Background().V(2).Info("Removed what Runs left in shared directories", "paths", removed)
		}
	}
	return err
}

// scratchIn makes home and tmp in dir, and returns the variables that
// point programs there.
func scratchIn(dir string) ([]string, error) {
	home, tmp := filepath.Join(dir, "home"), filepath.Join(dir, "tmp")
	for _, d := range []string{home, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	return []string{"HOME=" + home, "TMPDIR=" + tmp, "TMP=" + tmp, "TEMP=" + tmp}, nil
}

// removeScratch removes dir even where user code took away its own
// permission to write or enter a directory in it, which would otherwise
// keep what it wrote there.
func removeScratch(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	// WalkDir calls back before it reads a directory, so a mode restored
	// here lets it enter the directory next.
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
