package run

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
)

// archiveRuntimed answers ReadArchive with archive, or err.
type archiveRuntimed struct {
	runtimedclient.Interface
	archive []byte
	err     error
	format  kruntimes.RunFilesArchive
}

func (r *archiveRuntimed) ReadArchive(_ context.Context, _ runtimedclient.FileKey, _ string, format kruntimes.RunFilesArchive) (runtimedclient.FileReader, error) {
	r.format = format
	if r.err != nil {
		return nil, r.err
	}
	return bytes.NewReader(r.archive), nil
}

// recordingResponder records the error a handler answers.
type recordingResponder struct{ err error }

func (r *recordingResponder) Object(int, runtime.Object) {}
func (r *recordingResponder) Error(err error)            { r.err = err }

// TestReadArchiveAnswers: a directory's archive is answered with its
// content type as runtimed streams it; runtimed's error, before the
// answer started, is the API's.
func TestReadArchiveAnswers(t *testing.T) {
	for format, contentType := range map[kruntimes.RunFilesArchive]string{
		kruntimes.RunFilesArchiveTar:     "application/x-tar",
		kruntimes.RunFilesArchiveTarGzip: "application/gzip",
	} {
		rd := &archiveRuntimed{archive: bytes.Repeat([]byte("t"), 3<<20)}
		w, responder := httptest.NewRecorder(), &recordingResponder{}
		readArchive(w, httptest.NewRequest(http.MethodGet, "/", nil), rd, runtimedclient.FileKey{RunUID: "uid", Attempt: 1}, "src", format, responder)
		require.NoError(t, responder.err)
		assert.Equal(t, format, rd.format)
		assert.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, contentType, w.Header().Get("Content-Type"), format)
		assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))
		got, _ := io.ReadAll(w.Body)
		assert.Equal(t, rd.archive, got, "%s: the archive as runtimed streamed it", format)
	}

	rd := &archiveRuntimed{err: apierrors.NewNotFound(kruntimes.Resource("runs/files"), "nope")}
	w, responder := httptest.NewRecorder(), &recordingResponder{}
	readArchive(w, httptest.NewRequest(http.MethodGet, "/", nil), rd, runtimedclient.FileKey{}, "nope", kruntimes.RunFilesArchiveTar, responder)
	assert.True(t, apierrors.IsNotFound(responder.err), "runtimed's 404 is the answer: %v", responder.err)
	assert.Zero(t, w.Body.Len(), "nothing of an archive was written")
}
