package server

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"kruntimes.io/kruntimes/apis/sandboxfile"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// extractSuffix marks the temporary directory of an extraction in
// progress, beside its target: ".NAME" + extractSuffix + a random part.
const extractSuffix = ".kruntimes-extract-"

// readDirBatch is how many entries of a directory the merge reads at a
// time: what it holds of a directory, however many entries it has.
const readDirBatch = 256

// extractTar writes the tar archive the stream carries (gzip-compressed or
// not) into the directory that first's path names. Every entry goes into
// a temporary directory beside it, itself an os.Root, so that no entry's
// name, no link and no write through a link lands outside it; once the
// client closed its side the temporary directory is merged into the
// target: an archive that is refused or breaks off leaves nothing behind.
// What it holds is a chunk of the stream and a tar header.
func (s *Server) extractTar(stream runtimev1.FunctionRuntime_WriteFileServer, reg *registration, first *runtimev1.WriteFileRequest) error {
	p := first.GetPath()
	root, dirName, err := openWorkspace(reg, p)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	// A link to a directory inside the workspace is extracted into, as
	// tar -C does.
	if dirName, err = followFinalLink(root, reg.workingDir, dirName, p); err != nil {
		return err
	}
	dirName = filepath.Clean(dirName)
	switch fi, err := root.Stat(dirName); {
	case err == nil && !fi.IsDir():
		return status.Errorf(codes.InvalidArgument, "%q is not a directory; an archive is extracted into a directory", p)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fileError(err, p)
	}
	// The temporary directory is beside the target (in the same file
	// system, so that the merge renames), or in it for the workspace.
	tmpParent := filepath.Dir(dirName)
	tmpName := filepath.Join(tmpParent, "."+filepath.Base(dirName)+extractSuffix+randomID("", 8))
	if dirName == "." {
		tmpParent, tmpName = ".", extractSuffix+randomID("", 8)
	}
	if err := root.MkdirAll(tmpParent, 0o777); err != nil {
		return fileError(err, p)
	}
	if err := root.Mkdir(tmpName, 0o777); err != nil {
		return fileError(err, p)
	}
	defer func() { _ = root.RemoveAll(tmpName) }()
	tmp, err := root.OpenRoot(tmpName)
	if err != nil {
		return fileError(err, p)
	}
	defer func() { _ = tmp.Close() }()

	body := &streamReader{stream: stream, next: first, reg: reg, path: p}
	x := &extraction{tmp: tmp, dir: dirName, workDir: reg.workingDir, path: p}
	if err := x.archive(body); err != nil {
		return err
	}
	// The archive ended; what follows it (a tar writer's padding) is
	// read to the end of the stream: the extraction counts only once the
	// client closed its side without an error.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return body.failure(err)
	}
	// tmp stays a directory of its own until the merge moved what it holds.
	if err := x.merge(root, tmpName, dirName); err != nil {
		return err
	}
	return stream.SendAndClose(&runtimev1.WriteFileResponse{Path: p, Size: x.bytes, Files: x.files})
}

// extraction is one archive being extracted into tmp, bound for dir.
type extraction struct {
	tmp     *os.Root
	dir     string // the target, relative to the workspace
	workDir string
	path    string // the target as the request named it
	files   int64
	bytes   int64
}

// archive extracts every entry of the tar archive in body into tmp.
func (x *extraction) archive(body *streamReader) error {
	buffered := bufio.NewReaderSize(body, 64<<10)
	var in io.Reader = buffered
	if magic, err := buffered.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(buffered)
		if err != nil {
			return x.bad(body, err)
		}
		defer func() { _ = gz.Close() }()
		in = gz
	}
	tr := tar.NewReader(in)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return x.bad(body, err)
		}
		if err := x.entry(tr, hdr); err != nil {
			if body.err != nil {
				return body.failure(body.err)
			}
			return err
		}
	}
}

// bad is the error of an archive that cannot be read: the stream's own
// when it broke, else the archive's.
func (x *extraction) bad(body *streamReader, err error) error {
	if body.err != nil {
		return body.failure(body.err)
	}
	return status.Errorf(codes.InvalidArgument, "the archive for %q is not a tar archive, or it is cut short: %v; nothing was extracted", x.path, err)
}

// entry extracts one entry into tmp.
func (x *extraction) entry(tr *tar.Reader, hdr *tar.Header) error {
	name, err := x.entryName(hdr.Name)
	if err != nil || name == "." {
		return err // "." is the target itself, made anyway
	}
	refuse := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "the archive's entry %q "+format+"; nothing was extracted", append([]any{hdr.Name}, args...)...)
	}
	if parent := filepath.Dir(name); parent != "." {
		// A link the archive made is not a directory to extract into:
		// through one, an entry would land elsewhere than its name says,
		// and a link's target would be checked from the wrong place.
		if link := x.linkOnTheWay(parent); link != "" {
			return refuse("goes through the archive's symbolic link %q", filepath.ToSlash(link))
		}
		if err := x.tmp.MkdirAll(parent, 0o755); err != nil {
			return refuse("cannot be placed: %v", unwrapPath(err))
		}
	}
	// A later entry of the same name replaces an earlier one, as tar
	// does; a directory stays (and takes the entries below it).
	if fi, err := x.tmp.Lstat(name); err == nil && !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
		if err := x.tmp.Remove(name); err != nil {
			return refuse("replaces an earlier entry that cannot be removed: %v", unwrapPath(err))
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		// Writable by its owner while entries go in, whatever the archive
		// says: the sandbox's user owns it and may change it after.
		if err := x.tmp.MkdirAll(name, fs.FileMode(hdr.Mode)&fs.ModePerm|0o700); err != nil {
			return refuse("cannot be made a directory: %v", unwrapPath(err))
		}
	case tar.TypeReg:
		f, err := x.tmp.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fs.FileMode(hdr.Mode)&fs.ModePerm)
		if err != nil {
			return refuse("cannot be written: %v", unwrapPath(err))
		}
		n, err := io.Copy(f, tr)
		x.bytes += n
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
				return status.Errorf(codes.ResourceExhausted, "extract %q into %q: %v", hdr.Name, x.path, unwrapPath(err))
			}
			return refuse("is cut short or cannot be written: %v", unwrapPath(err))
		}
		x.files++
		if !hdr.ModTime.IsZero() {
			_ = x.tmp.Chtimes(name, hdr.ModTime, hdr.ModTime)
		}
	case tar.TypeSymlink:
		if err := x.linkTarget(name, hdr.Linkname); err != nil {
			return refuse("%v", err)
		}
		if err := x.tmp.Symlink(hdr.Linkname, name); err != nil {
			return refuse("cannot be made a symbolic link: %v", unwrapPath(err))
		}
	case tar.TypeLink:
		target, err := x.entryName(hdr.Linkname)
		if err != nil || target == "." {
			return refuse("is a hard link to %q, outside the archive", hdr.Linkname)
		}
		if err := x.tmp.Link(target, name); err != nil {
			return refuse("is a hard link to %q, which is not a file extracted before it: %v", hdr.Linkname, unwrapPath(err))
		}
		x.files++
	default:
		return refuse("is of type %q: only regular files, directories, symbolic links and hard links are extracted", string(hdr.Typeflag))
	}
	return nil
}

// linkOnTheWay is the first of dir and its parents that is a symbolic
// link in the extraction, or "".
func (x *extraction) linkOnTheWay(dir string) string {
	prefix := ""
	for _, part := range strings.Split(dir, string(filepath.Separator)) {
		prefix = filepath.Join(prefix, part)
		fi, err := x.tmp.Lstat(prefix)
		if err != nil {
			return "" // not made yet: MkdirAll makes directories
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return prefix
		}
	}
	return ""
}

// entryName is an entry's name, cleaned, relative to the archive's root;
// refused when absolute, when it climbs out by "..", or is too long.
func (x *extraction) entryName(name string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	switch {
	case name == "":
		return "", status.Errorf(codes.InvalidArgument, "the archive holds an entry without a name; nothing was extracted")
	case len(name) > sandboxfile.MaxPathBytes:
		return "", status.Errorf(codes.InvalidArgument, "the archive's entry %.64q… has a name over %d bytes; nothing was extracted", name, sandboxfile.MaxPathBytes)
	case strings.IndexByte(name, 0) >= 0:
		return "", status.Errorf(codes.InvalidArgument, "the archive's entry %q has a NUL in its name; nothing was extracted", name)
	case path.IsAbs(name):
		return "", status.Errorf(codes.InvalidArgument, "the archive's entry %q is an absolute path: entries are extracted relative to %q; nothing was extracted", name, x.path)
	case clean == ".." || strings.HasPrefix(clean, "../"):
		return "", status.Errorf(codes.InvalidArgument, "the archive's entry %q leaves the directory it is extracted into by \"..\"; nothing was extracted", name)
	}
	return filepath.FromSlash(clean), nil
}

// linkTarget refuses a symbolic link that, once in the target directory,
// would point outside the workspace: an absolute target elsewhere, or a
// relative one that climbs out. A link whose target is itself a link is
// followed by every file operation of the sandbox as any link is: inside
// or refused.
func (x *extraction) linkTarget(name, target string) error {
	if target == "" {
		return errors.New("is a symbolic link without a target")
	}
	if filepath.IsAbs(target) {
		if _, err := workspaceName(x.workDir, target); err != nil {
			return fmt.Errorf("is a symbolic link to %q, outside the sandbox's workspace", target)
		}
		return nil
	}
	resolved := filepath.Clean(filepath.Join(x.dir, filepath.Dir(name), target))
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("is a symbolic link to %q, which leads outside the sandbox's workspace", target)
	}
	return nil
}

// merge moves what src (the extraction's temporary directory) holds into
// dst, both relative to root: dst itself when it does not exist yet, else
// entry by entry. Before it moves anything it checks that no entry would
// replace a directory with something else or the reverse, so a conflict
// leaves dst as it was. Files and links replace those of the same name.
func (x *extraction) merge(root *os.Root, src, dst string) error {
	if err := x.conflicts(root, src, dst); err != nil {
		return err
	}
	if err := x.mergeDir(root, src, dst); err != nil {
		return status.Errorf(codes.Internal, "move the archive's entries into %q: %v; the workspace changed meanwhile? What was moved stays", x.path, unwrapPath(err))
	}
	return nil
}

// conflicts walks src, a directory at a time, and says which entry would
// replace a directory in dst by something else, or be a directory where
// dst has something else.
func (x *extraction) conflicts(root *os.Root, src, dst string) error {
	fi, err := root.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // moved whole
	}
	if err != nil {
		return fileError(err, x.path)
	}
	if !fi.IsDir() {
		rel, _ := filepath.Rel(x.dir, dst)
		return status.Errorf(codes.InvalidArgument, "the archive holds a directory %q where %q has a %s; nothing was extracted", filepath.ToSlash(rel), x.path, kindOf(fi.Mode().Type()))
	}
	return eachEntry(root, src, func(e fs.DirEntry) error {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if e.IsDir() {
			return x.conflicts(root, from, to)
		}
		if fi, err := root.Lstat(to); err == nil && fi.IsDir() {
			rel, _ := filepath.Rel(x.dir, to)
			return status.Errorf(codes.InvalidArgument, "the archive holds a %s %q where %q has a directory; nothing was extracted", kindOf(e.Type()), filepath.ToSlash(rel), x.path)
		}
		return nil
	})
}

// mergeDir moves src into dst: whole when dst is missing, else each entry.
func (x *extraction) mergeDir(root *os.Root, src, dst string) error {
	if _, err := root.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		return root.Rename(src, dst)
	}
	// Entries leave src as they are moved: read it again until it is
	// empty, so that what is held is a batch, whatever its size.
	for {
		moved := 0
		err := eachEntryOnce(root, src, func(e fs.DirEntry) error {
			from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
			moved++
			if e.IsDir() {
				return x.mergeDir(root, from, to)
			}
			return root.Rename(from, to)
		})
		if err != nil {
			return err
		}
		if moved == 0 {
			return root.Remove(src)
		}
	}
}

// eachEntry calls fn with every entry of the directory name, a batch at a
// time.
func eachEntry(root *os.Root, name string, fn func(fs.DirEntry) error) error {
	d, err := root.Open(name)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	for {
		batch, err := d.ReadDir(readDirBatch)
		for _, e := range batch {
			if err := fn(e); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// eachEntryOnce calls fn with the first batch of entries of the directory
// name.
func eachEntryOnce(root *os.Root, name string, fn func(fs.DirEntry) error) error {
	d, err := root.Open(name)
	if err != nil {
		return err
	}
	batch, err := d.ReadDir(readDirBatch)
	_ = d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for _, e := range batch {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// kindOf names what an entry is, for a message.
func kindOf(t fs.FileMode) string {
	switch {
	case t.IsDir():
		return "directory"
	case t&fs.ModeSymlink != 0:
		return "symbolic link"
	case t.IsRegular():
		return "file"
	}
	return "special file"
}

// streamReader reads the data of a WriteFile stream, message by message:
// what it holds is one message.
type streamReader struct {
	stream runtimev1.FunctionRuntime_WriteFileServer
	next   *runtimev1.WriteFileRequest // the message to read from, if any
	buf    []byte
	reg    *registration
	path   string
	err    error // what broke the stream, if it broke
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.next == nil {
			msg, err := r.stream.Recv()
			if errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			if err != nil {
				r.err = err
				return 0, err
			}
			if err := r.reg.ctx.Err(); err != nil {
				r.err = status.Errorf(codes.FailedPrecondition, "the registration of Run %s ended while an archive was extracted into %q; nothing was extracted", r.reg.runUID, r.path)
				return 0, r.err
			}
			r.next = msg
		}
		if len(r.next.GetData()) > sandboxfile.ChunkBytes {
			r.err = status.Errorf(codes.InvalidArgument, "a message carries at most %d bytes of the archive; this one %d", sandboxfile.ChunkBytes, len(r.next.GetData()))
			return 0, r.err
		}
		r.buf, r.next = r.next.GetData(), nil
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// failure is the gRPC error of a broken stream.
func (r *streamReader) failure(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Canceled, "the archive for %q broke off: %v; nothing was extracted", r.path, err)
}
