package server

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"kruntimes.io/kruntimes/apis/sandboxfile"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// Archived is what WriteTar put in an archive.
type Archived struct {
	// Entries is every entry written: directories, files and links.
	Entries int64
	// Files is the regular files among them, and Bytes their bytes.
	Files int64
	Bytes int64
	// Skipped is what was left out: sockets, FIFOs, devices, and entries
	// that vanished or changed type between the listing and the open.
	Skipped int64
}

// ErrFileShrank is WriteTar's error when a regular file holds fewer bytes
// than it had when it was opened: its header already promised them, and
// an archive padded with bytes the file never held would be wrong.
var ErrFileShrank = errors.New("a file shrank while it was archived")

// WriteTar writes a tar archive of the directory dir of root to w: depth
// first, names sorted and relative to dir (no entry for dir itself);
// directories, regular files and symbolic links, with their mode bits
// and modification time (owners are not kept). Symbolic links are stored
// as links and never followed, whatever they point to; sockets, FIFOs and
// devices are left out; a hard link is stored as a file of its own.
//
// Every directory of the walk is opened as an os.Root of its own from its
// parent's, and an entry is used only if what was opened is what the
// listing saw (os.SameFile): a name swapped for a link meanwhile is never
// followed out of dir. A regular file holds exactly the size it had when
// it was opened: bytes it gains meanwhile are left out; if it loses some,
// WriteTar fails with an error wrapping ErrFileShrank, and w holds a
// truncated archive. What it holds is a tar header, a copy buffer and the
// names of one directory per level of the walk, whatever the files' size.
func WriteTar(ctx context.Context, root *os.Root, dir string, w io.Writer) (Archived, error) {
	a := &archiver{ctx: ctx, tw: tar.NewWriter(w)}
	top, err := root.OpenRoot(dir)
	if err != nil {
		return Archived{}, err
	}
	defer func() { _ = top.Close() }()
	if err := a.dir(top, ""); err != nil {
		return a.done, err
	}
	return a.done, a.tw.Close()
}

// archiver is one WriteTar walk.
type archiver struct {
	ctx  context.Context
	tw   *tar.Writer
	done Archived
}

// dir writes the entries of d, whose name in the archive is prefix.
func (a *archiver) dir(d *os.Root, prefix string) error {
	names, err := dirNames(d)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		if err := a.entry(d, name, path.Join(prefix, name)); err != nil {
			return err
		}
	}
	return nil
}

// dirNames is the names of d's entries, sorted.
func dirNames(d *os.Root) ([]string, error) {
	f, err := d.Open(".")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var names []string
	for {
		batch, err := f.Readdirnames(readDirBatch)
		names = append(names, batch...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return names, nil
}

// entry writes the entry name of d, named archived in the archive.
func (a *archiver) entry(d *os.Root, name, archived string) error {
	fi, err := d.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		a.done.Skipped++ // removed since the listing
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		sub, err := d.OpenRoot(name)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				a.done.Skipped++
				return nil
			}
			return err
		}
		defer func() { _ = sub.Close() }()
		opened, err := sub.Stat(".")
		if err != nil {
			return err
		}
		if !os.SameFile(fi, opened) {
			a.done.Skipped++ // replaced (by a link?) since the Lstat
			return nil
		}
		if err := a.header(opened, archived+"/", tar.TypeDir, "", 0); err != nil {
			return err
		}
		return a.dir(sub, archived)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := d.Readlink(name)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) {
			a.done.Skipped++
			return nil
		}
		if err != nil {
			return err
		}
		return a.header(fi, archived, tar.TypeSymlink, target, 0)
	case fi.Mode().IsRegular():
		return a.file(d, name, archived, fi)
	}
	a.done.Skipped++
	return nil
}

// file writes a regular file: its header from the file as opened, then
// exactly that many bytes.
func (a *archiver) file(d *os.Root, name, archived string, listed fs.FileInfo) error {
	// O_NONBLOCK: if name became a FIFO since the Lstat, the open does not
	// wait for a writer (and SameFile leaves it out).
	f, err := d.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		a.done.Skipped++
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || !os.SameFile(listed, fi) {
		a.done.Skipped++
		return nil
	}
	if err := a.header(fi, archived, tar.TypeReg, "", fi.Size()); err != nil {
		return err
	}
	n, err := io.CopyN(a.tw, f, fi.Size())
	a.done.Bytes += n
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%q: %w from %d bytes to %d", archived, ErrFileShrank, fi.Size(), n)
	}
	if err != nil {
		return err
	}
	a.done.Files++
	return nil
}

// header writes the header of one entry. Owners are left out: the
// archive is extracted by whoever downloads it, as them.
func (a *archiver) header(fi fs.FileInfo, name string, typ byte, link string, size int64) error {
	mode := int64(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	if err := a.tw.WriteHeader(&tar.Header{
		Typeflag: typ, Name: name, Linkname: link, Size: size, Mode: mode, ModTime: fi.ModTime(),
	}); err != nil {
		return err
	}
	a.done.Entries++
	return nil
}

// readArchive is ReadFile with an archive: the directory req names, as
// a tar archive (gzip-compressed if asked), sent chunk by chunk as it is
// written.
func (s *Server) readArchive(req *runtimev1.ReadFileRequest, stream runtimev1.FunctionRuntime_ReadFileServer, reg *registration) error {
	p := req.GetPath()
	switch req.GetArchive() {
	case runtimev1.Archive_ARCHIVE_TAR, runtimev1.Archive_ARCHIVE_TAR_GZIP:
	default:
		return status.Errorf(codes.InvalidArgument, "archive %v is not one this Runtime Server writes: it writes tar archives, gzip-compressed or not", req.GetArchive())
	}
	root, name, err := openWorkspace(reg, p)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	// Checked before anything is sent: the caller answers these errors
	// as such, not as a stream cut short.
	switch fi, err := root.Stat(name); {
	case err != nil:
		return fileError(err, p)
	case !fi.IsDir():
		return status.Errorf(codes.InvalidArgument, "%q is not a directory: only a directory is read as an archive; read a file without one", p)
	}
	// The stream ends with the registration, as ReadFile's does.
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(reg.ctx, cancel)
	defer stop()

	out := &chunkWriter{send: stream.Send}
	var w io.Writer = out
	var gz *gzip.Writer
	if req.GetArchive() == runtimev1.Archive_ARCHIVE_TAR_GZIP {
		gz = gzip.NewWriter(out)
		w = gz
	}
	_, err = WriteTar(ctx, root, name, w)
	if err == nil && gz != nil {
		err = gz.Close()
	}
	if err == nil {
		err = out.flush()
	}
	switch {
	case err == nil:
		return nil
	case out.err != nil:
		return out.err // the stream broke: its own error
	case reg.ctx.Err() != nil:
		return status.Errorf(codes.FailedPrecondition, "the registration of Run %s ended while its directory %q was archived", reg.runUID, p)
	case errors.Is(err, ErrFileShrank):
		return status.Errorf(codes.Aborted, "archive %q: %v; the archive is cut short: read it again once the file stays put", p, err)
	case errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Internal, "archive %q: %v; the archive is cut short", p, unwrapPath(err))
}

// chunkWriter sends what is written to it in chunks of
// sandboxfile.ChunkBytes.
type chunkWriter struct {
	send func(*runtimev1.FileChunk) error
	buf  []byte
	err  error // the send that failed
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, sandboxfile.ChunkBytes)
		}
		n := min(len(p), sandboxfile.ChunkBytes-len(c.buf))
		c.buf = append(c.buf, p[:n]...)
		p, written = p[n:], written+n
		if len(c.buf) == sandboxfile.ChunkBytes {
			if err := c.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush sends what is buffered. A buffer per chunk: gRPC may hold a sent
// message after Send returns.
func (c *chunkWriter) flush() error {
	if c.err != nil {
		return c.err
	}
	if len(c.buf) == 0 {
		return nil
	}
	chunk := c.buf
	c.buf = nil
	if err := c.send(&runtimev1.FileChunk{Data: chunk}); err != nil {
		c.err = err
		return err
	}
	return nil
}
