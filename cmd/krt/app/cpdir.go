package app

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// tarDirectory writes the contents of the local directory dir to w as a tar
// archive, as it walks it: directories, regular files (mode and
// modification time kept) and symbolic links, stored as links and never
// followed. Anything else (a socket, a FIFO, a device) stops it with an
// error naming it, so that a copy is whole or refused.
func tarDirectory(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir(), info.Mode().IsRegular():
		default:
			return fmt.Errorf("%s is neither a file, a directory nor a symbolic link (%s): krt cp copies only those", p, info.Mode().Type())
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		// Owners mean nothing in the sandbox, which owns what it extracts.
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, info.Size()); err != nil {
			return fmt.Errorf("%s changed while it was copied: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// extracted counts what extractTar wrote, and the entries it left out.
type extracted struct {
	files, bytes int64
	skipped      []string
}

// extractTar extracts the tar archive r into the local directory dir
// (made when missing), merged with what is there, as tar -x -C dir would,
// but never outside dir: every entry is written through an os.Root of
// dir, so neither a name with ".." nor a link the archive made leads out.
// Symbolic links whose target would leave dir, and entries other than
// files, directories and links, are skipped and named. Modes keep their
// permission bits, not setuid, setgid or sticky ones.
func extractTar(r io.Reader, dir string) (extracted, error) {
	var out extracted
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return out, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return out, err
	}
	defer root.Close()
	var links []string
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			out.skipped = append(out.skipped, dropEscapingLinks(root, links)...)
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("reading the archive: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if name == "." {
			continue
		}
		if !filepath.IsLocal(filepath.FromSlash(name)) {
			out.skipped = append(out.skipped, hdr.Name)
			continue
		}
		local := filepath.FromSlash(name)
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(local, 0o755); err != nil {
				return out, err
			}
			if err := root.Chmod(local, mode|0o700); err != nil {
				return out, err
			}
		case tar.TypeReg:
			if err := mkParents(root, local); err != nil {
				return out, err
			}
			n, err := writeEntry(root, local, mode, tr)
			if err != nil {
				return out, err
			}
			out.files++
			out.bytes += n
		case tar.TypeSymlink:
			target := filepath.FromSlash(hdr.Linkname)
			if filepath.IsAbs(target) || !filepath.IsLocal(filepath.Join(filepath.Dir(local), target)) {
				out.skipped = append(out.skipped, hdr.Name+" -> "+hdr.Linkname)
				continue
			}
			if err := mkParents(root, local); err != nil {
				return out, err
			}
			_ = root.Remove(local)
			if err := root.Symlink(target, local); err != nil {
				return out, err
			}
			links = append(links, local)
		default:
			out.skipped = append(out.skipped, hdr.Name)
			continue
		}
		if hdr.Typeflag != tar.TypeSymlink {
			_ = root.Chtimes(local, hdr.ModTime, hdr.ModTime)
		}
	}
}

// dropEscapingLinks removes the links, made by extractTar, that resolve out
// of root: each stays inside by its own target, but a chain of them (one
// through another, made in any order) can still lead out.
func dropEscapingLinks(root *os.Root, links []string) []string {
	var dropped []string
	for _, l := range links {
		if _, err := root.Stat(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			target, _ := root.Readlink(l)
			_ = root.Remove(l)
			dropped = append(dropped, filepath.ToSlash(l)+" -> "+target)
		}
	}
	return dropped
}

func mkParents(root *os.Root, name string) error {
	if parent := filepath.Dir(name); parent != "." {
		return root.MkdirAll(parent, 0o755)
	}
	return nil
}

// writeEntry replaces the file name under root with what r reads.
func writeEntry(root *os.Root, name string, mode fs.FileMode, r io.Reader) (int64, error) {
	// A link in its place is replaced, never written through.
	if fi, err := root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if err := root.Remove(name); err != nil {
			return 0, err
		}
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode|0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("writing %s: %w", name, err)
	}
	return n, root.Chmod(name, mode)
}
