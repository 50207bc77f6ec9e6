package server

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"kruntimes.io/kruntimes/apis/sandboxfile"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// maxLinkHops bounds how many symbolic links a write follows at the end of
// its path, as the kernel's ELOOP does.
const maxLinkHops = 40

// uploadSuffix marks the temporary file of a write in progress, beside its
// target: ".NAME" + uploadSuffix + a random part.
const uploadSuffix = ".kruntimes-upload-"

// ReadFile implements runtimev1.FunctionRuntimeServer: it streams a file of
// a sandbox's workspace chunk by chunk, so what it holds is one chunk
// whatever the file's size; with an archive, a directory as one (see
// WriteTar).
func (s *Server) ReadFile(req *runtimev1.ReadFileRequest, stream runtimev1.FunctionRuntime_ReadFileServer) error {
	reg, err := s.fileRegistration(req.GetRunUid(), req.GetRegistrationId())
	if err != nil {
		return err
	}
	if req.GetArchive() != runtimev1.Archive_ARCHIVE_NONE {
		return s.readArchive(req, stream, reg)
	}
	root, name, err := openWorkspace(reg, req.GetPath())
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	// Stat first: opening a FIFO would block until someone writes to it.
	if err := regularFile(root, name, req.GetPath()); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fileError(err, req.GetPath())
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return status.Errorf(codes.InvalidArgument, "%q changed into something other than a regular file while it was opened", req.GetPath())
	}
	for {
		if err := reg.ctx.Err(); err != nil {
			return status.Errorf(codes.FailedPrecondition, "the registration of Run %s ended while its file %q was read", reg.runUID, req.GetPath())
		}
		// A buffer per chunk: gRPC may hold a sent message after Send returns.
		buf := make([]byte, sandboxfile.ChunkBytes)
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			if serr := stream.Send(&runtimev1.FileChunk{Data: buf[:n]}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return status.Errorf(codes.Internal, "read %q: %v", req.GetPath(), err)
		}
	}
}

// WriteFile implements runtimev1.FunctionRuntimeServer: the stream's data
// goes to a temporary file beside the target, renamed over it once the
// client closed its side. Any error on the way removes the temporary file
// and leaves the target as it was.
func (s *Server) WriteFile(stream runtimev1.FunctionRuntime_WriteFileServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "the first message of WriteFile names the registration and the path")
	}
	if err != nil {
		return err
	}
	reg, err := s.fileRegistration(first.GetRunUid(), first.GetRegistrationId())
	if err != nil {
		return err
	}
	switch first.GetExtract() {
	case runtimev1.Extract_EXTRACT_NONE:
	case runtimev1.Extract_EXTRACT_TAR:
		return s.extractTar(stream, reg, first)
	default:
		return status.Errorf(codes.InvalidArgument, "extract %v is not one this Runtime Server knows: it extracts tar archives", first.GetExtract())
	}
	p := first.GetPath()
	root, name, err := openWorkspace(reg, p)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	if name, err = followFinalLink(root, reg.workingDir, name, p); err != nil {
		return err
	}
	// The replacement keeps the mode of the file it replaces (a script
	// stays executable), as writing it in place would.
	mode := os.FileMode(0o666)
	switch fi, err := root.Stat(name); {
	case err == nil && fi.IsDir():
		return status.Errorf(codes.InvalidArgument, "%q is a directory; name a file in it", p)
	case err == nil && !fi.Mode().IsRegular():
		return status.Errorf(codes.InvalidArgument, "%q is not a regular file (%s); only regular files are written", p, fi.Mode().Type())
	case err == nil:
		mode = fi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return fileError(err, p)
	}
	dir := filepath.Dir(name)
	if err := root.MkdirAll(dir, 0o777); err != nil {
		return fileError(err, p)
	}
	tmpName := filepath.Join(dir, "."+filepath.Base(name)+uploadSuffix+randomID("", 8))
	tmp, err := root.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fileError(err, p)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tmp.Close()
			_ = root.Remove(tmpName)
		}
	}()
	size := int64(0)
	for msg := first; ; {
		if len(msg.GetData()) > sandboxfile.ChunkBytes {
			return status.Errorf(codes.InvalidArgument, "a message carries at most %d bytes of the file; this one %d", sandboxfile.ChunkBytes, len(msg.GetData()))
		}
		if _, err := tmp.Write(msg.GetData()); err != nil {
			return status.Errorf(codes.ResourceExhausted, "write %q: %v", p, err)
		}
		size += int64(len(msg.GetData()))
		if msg, err = stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		if err := reg.ctx.Err(); err != nil {
			return status.Errorf(codes.FailedPrecondition, "the registration of Run %s ended while its file %q was written; nothing was written", reg.runUID, p)
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		return status.Errorf(codes.Internal, "set the mode of %q: %v", p, err)
	}
	// Synced before the rename: after a crash the name holds the old
	// bytes or the new ones, never a file cut short.
	if err := tmp.Sync(); err != nil {
		return status.Errorf(codes.ResourceExhausted, "write %q: %v", p, err)
	}
	if err := tmp.Close(); err != nil {
		return status.Errorf(codes.ResourceExhausted, "write %q: %v", p, err)
	}
	if err := root.Rename(tmpName, name); err != nil {
		return fileError(err, p)
	}
	committed = true
	return stream.SendAndClose(&runtimev1.WriteFileResponse{Path: p, Size: size})
}

// fileRegistration finds the registration a file call names, and checks
// that its handler has its files served.
func (s *Server) fileRegistration(uid, id string) (*registration, error) {
	reg, err := s.lookupRegistration(uid, id)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(s.opts.FileHandlers, reg.handler) {
		return nil, status.Errorf(codes.FailedPrecondition, "Run %s's handler %q is not a sandbox: only the workspaces of %s are served as files", uid, reg.handler, strings.Join(s.opts.FileHandlers, ", "))
	}
	return reg, nil
}

// workspaceName is p as a name inside workDir for os.Root: a relative
// path as it is, an absolute one made relative when it is inside workDir.
// os.Root refuses what leaves the root on the way: "..", and symbolic
// links that resolve outside it.
func workspaceName(workDir, p string) (string, error) {
	switch {
	case p == "":
		return "", status.Error(codes.InvalidArgument, "a path is required: name a file in the sandbox's workspace")
	case len(p) > sandboxfile.MaxPathBytes:
		return "", status.Errorf(codes.InvalidArgument, "a path is at most %d bytes", sandboxfile.MaxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return "", status.Error(codes.InvalidArgument, "a path must not contain NUL")
	case !filepath.IsAbs(p):
		return p, nil
	}
	rel, err := filepath.Rel(workDir, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", status.Errorf(codes.InvalidArgument, "%q is outside the sandbox's workspace %s: name a file in it, relative to it or absolute inside it", p, workDir)
	}
	return rel, nil
}

// openWorkspace opens reg's workspace as an os.Root and names p in it,
// refused when it leaves the workspace; the caller closes the root.
func openWorkspace(reg *registration, p string) (*os.Root, string, error) {
	name, err := workspaceName(reg.workingDir, p)
	if err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(reg.workingDir)
	if err != nil {
		return nil, "", status.Errorf(codes.Internal, "open the workspace of Run %s: %v", reg.runUID, err)
	}
	return root, name, nil
}

// followFinalLink resolves symbolic links at the end of name, so that a
// write through a link that stays inside the workspace replaces the file
// it points to rather than the link; one that leads outside is refused.
func followFinalLink(root *os.Root, workDir, name, p string) (string, error) {
	for range maxLinkHops {
		fi, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return name, nil
		}
		if err != nil {
			return "", fileError(err, p)
		}
		if fi.Mode().Type() != fs.ModeSymlink {
			return name, nil
		}
		target, err := root.Readlink(name)
		if err != nil {
			return "", fileError(err, p)
		}
		if filepath.IsAbs(target) {
			if name, err = workspaceName(workDir, target); err != nil {
				return "", status.Errorf(codes.InvalidArgument, "%q is a symbolic link to %s, outside the sandbox's workspace", p, target)
			}
			continue
		}
		name = filepath.Join(filepath.Dir(name), target)
	}
	return "", status.Errorf(codes.InvalidArgument, "%q: too many levels of symbolic links", p)
}

// regularFile says why name is not a regular file that can be read.
func regularFile(root *os.Root, name, p string) error {
	fi, err := root.Stat(name)
	switch {
	case err != nil:
		return fileError(err, p)
	case fi.IsDir():
		return status.Errorf(codes.InvalidArgument, "%q is a directory; list it with the sandbox's list_files", p)
	case !fi.Mode().IsRegular():
		return status.Errorf(codes.InvalidArgument, "%q is not a regular file (%s); only regular files are read", p, fi.Mode().Type())
	}
	return nil
}

// fileError is the gRPC error of an error of os.Root.
func fileError(err error, p string) error {
	var pe *os.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return status.Errorf(codes.NotFound, "no file %q in the sandbox's workspace", p)
	// os.Root's error for a path that leaves it is not exported.
	case errors.As(err, &pe) && pe.Err.Error() == "path escapes from parent":
		return status.Errorf(codes.InvalidArgument, "%q leaves the sandbox's workspace (by \"..\" or a symbolic link that resolves outside it): name a file in it", p)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENAMETOOLONG):
		return status.Errorf(codes.InvalidArgument, "%q: %v", p, unwrapPath(err))
	case errors.Is(err, fs.ErrPermission):
		return status.Errorf(codes.PermissionDenied, "%q: the Runtime Server's user may not access it: %v", p, unwrapPath(err))
	}
	return status.Errorf(codes.Internal, "%q: %v", p, err)
}

// unwrapPath is err without os.PathError's operation and root-relative
// name, which repeat what the message says.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
