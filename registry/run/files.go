package run

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/sandboxfile"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
)

// FilesREST serves runs/files: the files of a sandbox's workspace, of any
// size, streamed from and to its Runtime Server through its runtimed.
// GET answers a file's bytes (verb get), or with archive=tar (or tar.gz)
// a directory as an archive; PUT replaces a file with the request's body,
// atomically (verb update), or with extract=tar extracts the body, a tar
// archive, into a directory. Neither holds more of a file
// than a chunk or two.
type FilesREST struct {
	router PodRouter
	runs   *genericregistry.Store
}

var (
	_ rest.Connecter       = &FilesREST{}
	_ rest.StorageMetadata = &FilesREST{}
)

// New implements rest.Storage.
func (r *FilesREST) New() runtime.Object { return &kruntimes.RunFilesOptions{} }

// Destroy does nothing: the router is stopped by whoever started it.
func (r *FilesREST) Destroy() {}

// ConnectMethods implements rest.Connecter.
func (r *FilesREST) ConnectMethods() []string { return []string{http.MethodGet, http.MethodPut} }

// NewConnectOptions implements rest.Connecter.
func (r *FilesREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &kruntimes.RunFilesOptions{}, false, ""
}

// ProducesMIMETypes implements rest.StorageMetadata.
func (r *FilesREST) ProducesMIMETypes(string) []string {
	return []string{sandboxfile.ContentType, sandboxfile.TarContentType, sandboxfile.TarGzipContentType}
}

// ProducesObject implements rest.StorageMetadata.
func (r *FilesREST) ProducesObject(string) any { return "" }

// FileWritten is PUT's answer.
type FileWritten struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// ArchiveExtracted is the answer of a PUT with extract=tar: the regular
// files (hard links included) extracted into Path, and their bytes.
type ArchiveExtracted struct {
	Path  string `json:"path"`
	Files int64  `json:"files"`
	Bytes int64  `json:"bytes"`
}

// Connect implements rest.Connecter.
func (r *FilesREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	o, _ := opts.(*kruntimes.RunFilesOptions)
	if o == nil || o.Path == "" {
		return nil, apierrors.NewBadRequest("name the file with ?path=: relative to the sandbox's workspace, or absolute inside it")
	}
	if len(o.Path) > sandboxfile.MaxPathBytes {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("a path is at most %d bytes", sandboxfile.MaxPathBytes))
	}
	switch o.Extract {
	case "", kruntimes.RunFilesExtractTar:
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("extract=%q is not an archive format runs/files extracts: use extract=%s (gzip-compressed or not)", o.Extract, kruntimes.RunFilesExtractTar))
	}
	switch o.Archive {
	case "", kruntimes.RunFilesArchiveTar, kruntimes.RunFilesArchiveTarGzip:
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("archive=%q is not an archive format runs/files writes: use archive=%s or archive=%s (gzip-compressed)", o.Archive, kruntimes.RunFilesArchiveTar, kruntimes.RunFilesArchiveTarGzip))
	}
	obj, err := r.runs.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	run := obj.(*kruntimes.Run)
	switch {
	case run.Spec.Mode.Function == nil:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Run %s is a task: only a sandbox (a function Run with handler %s) serves files", name, sandboxfile.Handler))
	case run.Spec.Mode.Function.Handler != sandboxfile.Handler:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Run %s's handler is %q, not a sandbox: only a function Run with handler %s serves files", name, run.Spec.Mode.Function.Handler, sandboxfile.Handler))
	case lifecycle.IsTerminal(run.Status.Phase):
		return nil, apierrors.NewConflict(kruntimes.Resource("runs"), name, fmt.Errorf("it ended (%s) and serves no files any more", run.Status.Phase))
	case run.Status.Phase != lifecycle.Ready || run.Status.AssignedPod == "":
		// As an invoke of a function that is not Ready yet: a sandbox
		// being created or recovered serves its files shortly.
		return nil, runtimedclient.Unavailable(fmt.Sprintf("Run %s is %s, not Ready: a sandbox serves its files while it is Ready; retry shortly", name, run.Status.Phase))
	}
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	key := runtimedclient.FileKey{RunUID: run.UID, Attempt: run.Status.Attempt, PodUID: run.Status.AssignedPodUID}
	if user, ok := genericapirequest.UserFrom(ctx); ok {
		key.Caller = user.GetName()
	}
	client, err := r.router.Runtimed(namespace, run.Status.AssignedPod, run.Status.AssignedPodUID)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case req.Method == http.MethodPut && o.Archive != "":
			responder.Error(apierrors.NewBadRequest("archive applies to GET only: PUT takes an archive with extract=tar"))
			return
		case req.Method == http.MethodPut && o.Extract == kruntimes.RunFilesExtractTar:
			extractTar(w, req, client, key, o.Path, responder)
			return
		case req.Method == http.MethodPut:
			writeFile(w, req, client, key, o.Path, responder)
			return
		case o.Extract != "":
			responder.Error(apierrors.NewBadRequest("extract applies to PUT only: GET reads one file, or a directory's archive with archive=tar"))
			return
		case o.Archive != "":
			readArchive(w, req, client, key, o.Path, o.Archive, responder)
			return
		}
		readFile(w, req, client, key, o.Path, responder)
	}), nil
}

func readFile(w http.ResponseWriter, req *http.Request, client runtimedclient.Interface, key runtimedclient.FileKey, path string, responder rest.Responder) {
	file, err := client.ReadFile(req.Context(), key, path)
	if err != nil {
		responder.Error(err)
		return
	}
	streamFile(w, req, file, key, sandboxfile.ContentType)
}

// readArchive answers the directory dir as an archive, written as the
// Runtime Server walks it.
func readArchive(w http.ResponseWriter, req *http.Request, client runtimedclient.Interface, key runtimedclient.FileKey, dir string, format kruntimes.RunFilesArchive, responder rest.Responder) {
	archive, err := client.ReadArchive(req.Context(), key, dir, format)
	if err != nil {
		responder.Error(err)
		return
	}
	contentType := sandboxfile.TarContentType
	if format == kruntimes.RunFilesArchiveTarGzip {
		contentType = sandboxfile.TarGzipContentType
	}
	streamFile(w, req, archive, key, contentType)
}

// streamFile answers what file holds as it arrives, never more than a chunk
// at a time.
func streamFile(w http.ResponseWriter, req *http.Request, file runtimedclient.FileReader, key runtimedclient.FileKey, contentType string) {
	ctx := req.Context()
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if n, err := file.WriteTo(w); err != nil && ctx.Err() == nil {
		// The answer started: cutting it short is all that is left, and
		// a client that counts the bytes or checks a digest sees it.
		klog.FromContext(ctx).Info("A sandbox file's stream broke; the answer is cut short", "runUID", key.RunUID, "sent", n, "err", err)
		panic(http.ErrAbortHandler)
	}
}

func writeFile(w http.ResponseWriter, req *http.Request, client runtimedclient.Interface, key runtimedclient.FileKey, path string, responder rest.Responder) {
	size, err := client.WriteFile(req.Context(), key, path, req.Body)
	if err != nil {
		responder.Error(err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(FileWritten{Path: path, Size: size})
}

func extractTar(w http.ResponseWriter, req *http.Request, client runtimedclient.Interface, key runtimedclient.FileKey, dir string, responder rest.Responder) {
	extracted, err := client.ExtractTar(req.Context(), key, dir, req.Body)
	if err != nil {
		responder.Error(err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(ArchiveExtracted{Path: dir, Files: extracted.Files, Bytes: extracted.Bytes})
}
