package server

import (
	"os"
	"path/filepath"
	"syscall"
)

// Sweeper removes what user code wrote, outside its own HOME, TMPDIR and
// workspace, to directories of the Runtime Server's container that the next
// Run would share: each time the server goes idle (no function registered,
// no task running), every entry of its user in those directories that was
// not there, as it was, when the server started. Only a Runtime Server
// that is its container's init may be given system directories (/tmp,
// /dev/shm, its HOME): anything of its user there is then its Runs'.
type Sweeper struct {
	uid  int
	dirs []sweptDir
	// keep are paths never removed (the server's socket, its state
	// directory).
	keep map[string]bool
}

type sweptDir struct {
	path string
	// before is what the directory held at start.
	before map[string]stamp
}

// stamp is what says an entry is unchanged since start.
type stamp struct {
	mode    os.FileMode
	size    int64
	modTime int64
}

// NewSweeper records what dirs hold now; paths in keep are never removed.
// A directory that does not exist is left out.
func NewSweeper(dirs, keep []string) *Sweeper {
	s := &Sweeper{uid: os.Getuid(), keep: map[string]bool{}}
	for _, k := range keep {
		s.keep[filepath.Clean(k)] = true
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		d = filepath.Clean(d)
		if d == "/" || seen[d] {
			continue
		}
		seen[d] = true
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		swept := sweptDir{path: d, before: map[string]stamp{}}
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				swept.before[e.Name()] = stampOf(info)
			}
		}
		s.dirs = append(s.dirs, swept)
	}
	return s
}

func stampOf(info os.FileInfo) stamp {
	return stamp{mode: info.Mode(), size: info.Size(), modTime: info.ModTime().UnixNano()}
}

// Sweep removes, from each directory, the entries of this process's user
// that are new or changed since NewSweeper (an entry, whole: what is new
// deep inside an unchanged directory stays), except keep. It runs only when
// no Run is registered, so nothing it removes is in use. It returns the
// paths it removed.
func (s *Sweeper) Sweep() []string {
	if s == nil {
		return nil
	}
	var removed []string
	for _, d := range s.dirs {
		entries, err := os.ReadDir(d.path)
		if err != nil {
			continue
		}
		for _, e := range entries {
			path := filepath.Join(d.path, e.Name())
			info, err := e.Info()
			if err != nil || s.keep[path] {
				continue
			}
			if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != s.uid {
				continue
			}
			if before, ok := d.before[e.Name()]; ok && before == stampOf(info) {
				continue
			}
			if removeScratch(path) == nil {
				removed = append(removed, path)
			}
		}
	}
	return removed
}
