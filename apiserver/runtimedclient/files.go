package runtimedclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/sandboxfile"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// FileKey names the sandbox whose workspace a file is read from or
// written to: the fencing tuple runtimed admits as an invocation's, and
// the caller for its audit line.
type FileKey struct {
	RunUID  types.UID
	Attempt int32
	PodUID  types.UID
	Caller  string
}

// FileReader is a file being read from a sandbox: WriteTo writes its
// chunks as they arrive, so that nothing but a chunk is held.
type FileReader interface {
	io.WriterTo
}

// ReadFile implements Interface. The first chunk is read here: a missing
// file or a refused path fails before the caller starts its answer.
func (c *Client) ReadFile(ctx context.Context, key FileKey, path string) (FileReader, error) {
	return c.readFile(ctx, key, path, runtimev1.Archive_ARCHIVE_NONE)
}

// ReadArchive implements Interface: as ReadFile, and the Runtime Server
// writes the archive as it walks the directory.
func (c *Client) ReadArchive(ctx context.Context, key FileKey, dir string, format kruntimes.RunFilesArchive) (FileReader, error) {
	var archive runtimev1.Archive
	switch format {
	case kruntimes.RunFilesArchiveTar:
		archive = runtimev1.Archive_ARCHIVE_TAR
	case kruntimes.RunFilesArchiveTarGzip:
		archive = runtimev1.Archive_ARCHIVE_TAR_GZIP
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("archive=%q is not an archive format runs/files writes: use archive=%s or archive=%s", format, kruntimes.RunFilesArchiveTar, kruntimes.RunFilesArchiveTarGzip))
	}
	return c.readFile(ctx, key, dir, archive)
}

// readFile opens the stream of a file, or of a directory's archive, and
// reads its first chunk.
func (c *Client) readFile(ctx context.Context, key FileKey, path string, archive runtimev1.Archive) (FileReader, error) {
	stream, err := c.rpc.ReadFile(ctx, &runtimedv1.ReadFileRequest{
		RunUid: string(key.RunUID), Attempt: key.Attempt, PodUid: string(key.PodUID), Path: path, Caller: key.Caller, Archive: archive,
	})
	if err != nil {
		return nil, fileError(err, path)
	}
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return &fileReader{}, nil // an empty file
	}
	if err != nil {
		return nil, fileError(err, path)
	}
	return &fileReader{first: first.GetData(), next: stream.Recv}, nil
}

type fileReader struct {
	first []byte
	next  func() (*runtimev1.FileChunk, error)
}

// WriteTo writes every chunk to w, and says what broke the stream, if
// anything did.
func (r *fileReader) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(r.first)
	written := int64(n)
	if err != nil || r.next == nil {
		return written, err
	}
	for {
		chunk, err := r.next()
		if errors.Is(err, io.EOF) {
			return written, nil
		}
		if err != nil {
			return written, err
		}
		n, err := w.Write(chunk.GetData())
		written += int64(n)
		if err != nil {
			return written, err
		}
	}
}

// WriteFile implements Interface: body goes to runtimed in chunks of
// sandboxfile.ChunkBytes as it is read, and the file is replaced only
// once body ended (io.EOF). A body that breaks off cancels the call, and
// nothing is written.
func (c *Client) WriteFile(ctx context.Context, key FileKey, path string, body io.Reader) (int64, error) {
	resp, err := c.writeFile(ctx, key, &runtimev1.WriteFileRequest{Path: path}, body)
	return resp.GetSize(), err
}

// Extracted is what ExtractTar extracted: the regular files (hard links
// included) and their bytes.
type Extracted struct {
	Files int64
	Bytes int64
}

// ExtractTar implements Interface: as WriteFile, and the Runtime Server
// extracts what it receives.
func (c *Client) ExtractTar(ctx context.Context, key FileKey, dir string, body io.Reader) (Extracted, error) {
	resp, err := c.writeFile(ctx, key, &runtimev1.WriteFileRequest{Path: dir, Extract: runtimev1.Extract_EXTRACT_TAR}, body)
	if err != nil {
		return Extracted{}, err
	}
	return Extracted{Files: resp.GetFiles(), Bytes: resp.GetSize()}, nil
}

// writeFile streams body to runtimed after first, the request that names
// the file (or the directory of an archive).
func (c *Client) writeFile(ctx context.Context, key FileKey, first *runtimev1.WriteFileRequest, body io.Reader) (*runtimev1.WriteFileResponse, error) {
	path := first.GetPath()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.WriteFile(ctx)
	if err != nil {
		return nil, fileError(err, path)
	}
	msg := &runtimedv1.WriteFileRequest{RunUid: string(key.RunUID), Attempt: key.Attempt, PodUid: string(key.PodUID), Caller: key.Caller,
		File: first}
	read := int64(0)
	for {
		// A buffer per message: gRPC may hold a sent message after Send
		// returns.
		buf := make([]byte, sandboxfile.ChunkBytes)
		n, rerr := io.ReadFull(body, buf)
		read += int64(n)
		msg.File.Data = buf[:n]
		ended := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
		if rerr != nil && !ended {
			cancel()
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the upload of %q broke off after %d bytes: %v; nothing was written", path, read, rerr))
		}
		if n > 0 || msg.RunUid != "" {
			if err := stream.Send(msg); err != nil {
				break // runtimed ended the call: its error comes with CloseAndRecv
			}
		}
		if ended {
			break
		}
		msg = &runtimedv1.WriteFileRequest{File: &runtimev1.WriteFileRequest{}}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fileError(err, path)
	}
	return resp, nil
}

// fileError is the API error of a file call's gRPC error.
func fileError(err error, path string) error {
	st, ok := status.FromError(err)
	if !ok {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("reach the sandbox for %q: %v; try again", path, err))
	}
	switch st.Code() {
	case codes.NotFound:
		e := apierrors.NewNotFound(kruntimes.Resource("runs/files"), path)
		e.ErrStatus.Message = st.Message()
		return e
	case codes.InvalidArgument, codes.PermissionDenied:
		return apierrors.NewBadRequest(st.Message())
	case codes.FailedPrecondition, codes.Unavailable:
		// runtimed's gate refused the fencing tuple (the sandbox is moving
		// or restarting) or was not reached: nothing was read or written.
		return Unavailable(fmt.Sprintf("the sandbox cannot serve %q right now: %s; try again", path, st.Message()))
	case codes.ResourceExhausted:
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInsufficientStorage,
			Reason: metav1.StatusReasonInternalError, Message: st.Message() + "; nothing was written"}}
	case codes.Canceled, codes.DeadlineExceeded:
		return apierrors.NewTimeoutError(fmt.Sprintf("the transfer of %q ended before it completed: %s", path, st.Message()), 0)
	}
	return apierrors.NewInternalError(fmt.Errorf("the transfer of %q failed: %s", path, st.Message()))
}
