package run

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runlog"
	logstore "kruntimes.io/kruntimes/registry/runlog"
)

// maxLogBodyBytes bounds a hand-over's body: a log of the Runtime Server's
// largest bound (3 MiB), with each chunk's framing. runtimed sends
// protobuf (about 4.6 MiB at worst); JSON, which an older runtimed sends,
// carries the bytes in base64 and needs the rest (about 12 MiB).
const maxLogBodyBytes = 16 << 20

// KeptAttempts is how many of a task Run's latest attempts keep their
// logs: a Run that retries a hundred times holds ten logs, not a hundred.
const KeptAttempts = 10

// notKept says attempt's log is older than the last KeptAttempts of run.
func notKept(run *kruntimes.Run, attempt int32) error {
	if attempt > run.Status.Attempt-KeptAttempts {
		return nil
	}
	return apierrors.NewGone(fmt.Sprintf("the log of attempt %d of Run %s is no longer kept: only the last %d attempts' logs are (attempts %d to %d)",
		attempt, run.Name, KeptAttempts, run.Status.Attempt-KeptAttempts+1, run.Status.Attempt))
}

// runLogKind is what a hand-over's body is read as when it does not say.
var runLogKind = v1alpha1.SchemeGroupVersion.WithKind("RunLog")

// LogREST serves runs/log: GET answers the kept log of an attempt of a
// task Run as text, exactly as written; POST is runtimed handing it over
// before it records the attempt's outcome.
type LogREST struct {
	// router reaches the runtimed of a running Run, and wakes a follow
	// waiting for its Run to move.
	router LogRouter
	runs   *genericregistry.Store
	logs   *logstore.Store
	// limits are the log store's, for the words of a warning.
	limits logstore.Limits
	// codecs decode a hand-over's body.
	codecs serializer.CodecFactory
	// events records a Warning Event on a Run whose log was kept cut;
	// nil records none (a server without a cluster).
	events record.EventRecorder
}

var (
	_ rest.Connecter = &LogREST{}
	_ rest.Storage   = &LogREST{}
)

// New returns the kind a hand-over carries.
func (r *LogREST) New() runtime.Object { return &kruntimes.RunLog{} }

// Destroy releases the log store.
func (r *LogREST) Destroy() { r.logs.Destroy() }

// ConnectMethods implements rest.Connecter: GET reads (verb get), POST
// hands a log over (verb create).
func (r *LogREST) ConnectMethods() []string { return []string{http.MethodGet, http.MethodPost} }

// NewConnectOptions implements rest.Connecter.
func (r *LogREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &kruntimes.RunLogOptions{}, false, ""
}

// ProducesMIMETypes implements rest.StorageMetadata, as pods/log does.
func (r *LogREST) ProducesMIMETypes(string) []string { return []string{"text/plain"} }

// ProducesObject implements rest.StorageMetadata.
func (r *LogREST) ProducesObject(string) any { return "" }

// ValidateLogOptions says what is wrong with runs/log's options.
func ValidateLogOptions(o *kruntimes.RunLogOptions) field.ErrorList {
	var errs field.ErrorList
	if o.TailLines != nil && *o.TailLines < 0 {
		errs = append(errs, field.Invalid(field.NewPath("tailLines"), *o.TailLines, "must not be negative"))
	}
	if o.LimitBytes != nil && *o.LimitBytes < 1 {
		errs = append(errs, field.Invalid(field.NewPath("limitBytes"), *o.LimitBytes, "must be positive"))
	}
	if o.Attempt != nil && *o.Attempt < 1 {
		errs = append(errs, field.Invalid(field.NewPath("attempt"), *o.Attempt, "attempts count from 1"))
	}
	if o.Command != "" && !commandID.MatchString(o.Command) {
		errs = append(errs, field.Invalid(field.NewPath("command"), o.Command, "a command id is 1 to 64 letters, digits, '.', '_' or '-', as start_command answers it"))
	}
	switch o.Stream {
	case "", kruntimes.RunLogStreamAll, kruntimes.RunLogStreamStdout, kruntimes.RunLogStreamStderr:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("stream"), o.Stream, []string{string(kruntimes.RunLogStreamAll), string(kruntimes.RunLogStreamStdout), string(kruntimes.RunLogStreamStderr)}))
	}
	return errs
}

// Connect implements rest.Connecter.
func (r *LogREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	options, _ := opts.(*kruntimes.RunLogOptions)
	if options == nil {
		options = &kruntimes.RunLogOptions{}
	}
	if errs := ValidateLogOptions(options); len(errs) > 0 {
		return nil, apierrors.NewInvalid(kruntimes.Kind("RunLogOptions"), name, errs)
	}
	obj, err := r.runs.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	run := obj.(*kruntimes.Run)
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	if options.Command != "" {
		if run.Spec.Mode.Function == nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("Run %s is a task: only a function Run (a sandbox) starts background commands; drop ?command", name))
		}
		if options.Attempt != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("a command of Run %s belongs to its current registration: drop ?attempt", name))
		}
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method == http.MethodPost {
				responder.Error(apierrors.NewBadRequest(fmt.Sprintf("the output of a command of Run %s is not handed over", name)))
				return
			}
			r.followCommand(req.Context(), w, namespace, run, options, responder)
		}), nil
	}
	if run.Spec.Mode.Function != nil {
		if !options.Follow {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("Run %s is a function: nothing of its log is kept; follow it live with follow=true, and each invocation answers its own logs", name))
		}
		if options.Attempt != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("Run %s is a function: a follow of it follows every attempt, without ?attempt", name))
		}
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method == http.MethodPost {
				responder.Error(apierrors.NewBadRequest(fmt.Sprintf("Run %s is a function: nothing of its log is kept", name)))
				return
			}
			r.followFunction(req.Context(), w, namespace, run, options)
		}), nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			r.save(req, namespace, run, options, responder)
			return
		}
		r.serve(req.Context(), w, namespace, run, options, responder)
	}), nil
}

// attemptsExist names the attempts a Run has had, for a 400.
func attemptsExist(run *kruntimes.Run) string {
	switch n := run.Status.Attempt; n {
	case 0:
		return "none has started yet"
	case 1:
		return "attempt 1 exists"
	default:
		return fmt.Sprintf("attempts 1 to %d exist", n)
	}
}

func (r *LogREST) serve(ctx context.Context, w http.ResponseWriter, namespace string, run *kruntimes.Run, o *kruntimes.RunLogOptions, responder rest.Responder) {
	attempt := run.Status.Attempt
	if o.Attempt != nil {
		attempt = *o.Attempt
		if attempt > run.Status.Attempt {
			responder.Error(apierrors.NewBadRequest(fmt.Sprintf("attempt %d of Run %s never ran: %s", attempt, run.Name, attemptsExist(run))))
			return
		}
		if err := notKept(run, attempt); err != nil {
			responder.Error(err)
			return
		}
	}
	if o.Follow {
		r.follow(ctx, w, namespace, run, followAttempt(run, o), o)
		return
	}
	var record *kruntimes.RunLog
	if attempt > 0 {
		var err error
		if record, err = r.logs.Get(ctx, namespace, run.Name, run.UID, attempt); err != nil {
			responder.Error(apierrors.NewInternalError(fmt.Errorf("read the log of attempt %d of Run %s: %w", attempt, run.Name, err)))
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if record != nil {
		// Streamed as rendered: timestamps make the text far larger than
		// the record.
		_ = runlog.RenderTo(w, logOf(record), runlog.RenderOptions{
			Stream: runlog.Stream(o.Stream), Timestamps: o.Timestamps, TailLines: o.TailLines, LimitBytes: o.LimitBytes,
		})
	}
}

func (r *LogREST) save(req *http.Request, namespace string, run *kruntimes.Run, o *kruntimes.RunLogOptions, responder rest.Responder) {
	if o.Attempt == nil {
		responder.Error(apierrors.NewBadRequest("a log is handed over with ?attempt=N"))
		return
	}
	if *o.Attempt > run.Status.Attempt {
		responder.Error(apierrors.NewBadRequest(fmt.Sprintf("attempt %d of Run %s never ran: %s", *o.Attempt, run.Name, attemptsExist(run))))
		return
	}
	if err := notKept(run, *o.Attempt); err != nil {
		responder.Error(err)
		return
	}
	// Decoded as every request body is, by the server's codecs: protobuf
	// from runtimed, JSON from an older one or from a hand.
	info, err := negotiation.NegotiateInputSerializer(req, false, r.codecs)
	if err != nil {
		responder.Error(err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, req.Body, maxLogBodyBytes))
	if err != nil {
		responder.Error(apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a log hand-over is at most %d bytes: %v", maxLogBodyBytes, err)))
		return
	}
	decoder := r.codecs.DecoderToVersion(info.Serializer, kruntimes.SchemeGroupVersion)
	obj, _, err := decoder.Decode(body, &runLogKind, &kruntimes.RunLog{})
	if err != nil {
		responder.Error(apierrors.NewBadRequest(fmt.Sprintf("decode the RunLog: %v", err)))
		return
	}
	log, ok := obj.(*kruntimes.RunLog)
	if !ok {
		responder.Error(apierrors.NewBadRequest(fmt.Sprintf("a log hand-over carries a RunLog, not a %T", obj)))
		return
	}
	ctx := req.Context()
	kept, err := r.logs.Save(ctx, namespace, run.Name, run.UID, *o.Attempt, log)
	if err != nil {
		responder.Error(apierrors.NewInternalError(fmt.Errorf("keep the log of attempt %d of Run %s: %w", *o.Attempt, run.Name, err)))
		return
	}
	if dropped := kept.DroppedBytes - log.DroppedBytes; kept.DroppedBy != "" && dropped > 0 {
		// Kept all the same: the hand-over succeeded, and the log says
		// where and why bytes are missing; runtimed logs the warning, and
		// the Run's owner sees the Event (kubectl describe run).
		logDroppedBytes.WithLabelValues(kept.DroppedBy).Add(float64(dropped))
		message := droppedWarning(run, *o.Attempt, kept.DroppedBy, dropped, r.limits)
		warning.AddWarning(ctx, "", message)
		if r.events != nil {
			r.events.Event(runReference(run), corev1.EventTypeWarning, lifecycle.ReasonLogCut, message)
		}
	}
	// A delete of the Run that raced this hand-over removed its logs
	// before this one was written: read the Run again, from storage, and
	// take the log back if the Run is gone. A delete after this read
	// removes it itself (deleteLogs).
	if err := r.stillThere(ctx, run); err != nil {
		if derr := r.logs.DeleteAttempt(ctx, namespace, run.Name, run.UID, *o.Attempt); derr != nil {
			klog.FromContext(ctx).Error(derr, "The log of a Run deleted during its hand-over was left behind", "run", klog.KObj(run), "runUID", run.UID)
		}
		responder.Error(err)
		return
	}
	if older := *o.Attempt - KeptAttempts; older > 0 {
		if err := r.logs.DeleteAttempt(ctx, namespace, run.Name, run.UID, older); err != nil {
			klog.FromContext(ctx).Error(err, "An attempt's log past the last ones kept was left behind", "run", klog.KObj(run), "attempt", older)
		}
	}
	responder.Object(http.StatusCreated, &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

// stillThere reads run again, past the watch cache: NotFound when it was
// deleted (or replaced by another Run of its name) since it was read.
func (r *LogREST) stillThere(ctx context.Context, run *kruntimes.Run) error {
	obj, err := r.runs.Get(genericapirequest.WithNamespace(ctx, run.Namespace), run.Name, &metav1.GetOptions{})
	if err != nil {
		return err
	}
	if obj.(*kruntimes.Run).UID != run.UID {
		return apierrors.NewNotFound(kruntimes.Resource("runs"), run.Name)
	}
	return nil
}

// logOf is a stored record as apis/runlog renders it.
func logOf(record *kruntimes.RunLog) runlog.Log {
	l := runlog.Log{Chunks: make([]runlog.Chunk, len(record.Chunks)), DroppedBytes: record.DroppedBytes, DroppedAfter: int(record.DroppedAfter), DroppedBy: record.DroppedBy}
	for i, c := range record.Chunks {
		l.Chunks[i] = runlog.Chunk{Stream: runlog.Stream(c.Stream), Time: time.Unix(0, c.UnixNano), Data: c.Data}
	}
	return l
}

// deleteLogs is the Runs store's AfterDelete: the logs go with their Run
// (kubectl delete, the last finalizer, TTL GC, namespace deletion).
func deleteLogs(logs *logstore.Store) genericregistry.AfterDeleteFunc {
	return func(obj runtime.Object, _ *metav1.DeleteOptions) {
		run, ok := obj.(*kruntimes.Run)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := logs.Delete(ctx, run.Namespace, run.Name, run.UID, max(run.Status.Attempt, 1)); err != nil {
			klog.Background().Error(err, "The logs of a deleted Run were left behind; they are never served for a later Run of the name", "run", klog.KObj(run), "runUID", run.UID)
		}
	}
}

// droppedWarning says why a hand-over's log was kept cut, naming the limit
// and the flag of kruntimes-apiserver that sets it.
func droppedWarning(run *kruntimes.Run, attempt int32, by string, dropped int64, limits logstore.Limits) string {
	if by == kruntimes.RunLogDroppedByNamespaceLimit {
		return fmt.Sprintf("%d bytes of the log of attempt %d of Run %s were not kept: namespace %s holds its limit of %d bytes of kept logs (kruntimes-apiserver --max-log-bytes-per-namespace); delete finished Runs (or set ttlSecondsAfterFinished) to keep more",
			dropped, attempt, run.Name, run.Namespace, limits.NamespaceBytes)
	}
	return fmt.Sprintf("%d bytes of the log of attempt %d of Run %s were not kept: the storage backend keeps at most %d bytes of a log (kruntimes-apiserver --max-log-record-bytes)", dropped, attempt, run.Name, limits.RecordBytes)
}

// runReference is run as an Event's involvedObject: the served version,
// which the internal object cannot name itself.
func runReference(run *kruntimes.Run) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Run",
		Namespace: run.Namespace, Name: run.Name, UID: run.UID, ResourceVersion: run.ResourceVersion,
	}
}

// SweepEvery sweeps the kept logs (logstore.Store.Sweep) at start and then
// every interval until ctx ends. Every replica sweeps: a sweep is safe to
// run twice, and concurrently.
func (r *LogREST) SweepEvery(ctx context.Context, interval time.Duration) {
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) { _, _ = r.Sweep(ctx) }, interval, 0.1, true)
}

// Sweep deletes the log records no Run holds any more and counts each
// namespace's kept-log bytes again.
func (r *LogREST) Sweep(ctx context.Context) (logstore.SweepResult, error) {
	logger := klog.FromContext(ctx)
	result, err := r.logs.Sweep(ctx, KeptAttempts, r.runState)
	logSweptRecords.Add(float64(result.Deleted))
	if result.Deleted > 0 {
		logger.Info("Deleted log records whose Run is gone", "records", result.Deleted, "bytes", result.FreedBytes)
	}
	if err != nil {
		logger.Error(err, "The sweep of kept logs did not finish; the next one tries again")
	}
	return result, err
}

// runState reads the Run a log record names: from the watch cache, or
// from storage when fresh.
func (r *LogREST) runState(ctx context.Context, namespace, name string, fresh bool) (logstore.RunState, error) {
	opts := &metav1.GetOptions{ResourceVersion: "0"}
	if fresh {
		opts = &metav1.GetOptions{}
	}
	obj, err := r.runs.Get(genericapirequest.WithNamespace(ctx, namespace), name, opts)
	if apierrors.IsNotFound(err) {
		return logstore.RunState{}, nil
	}
	if err != nil {
		return logstore.RunState{}, err
	}
	run := obj.(*kruntimes.Run)
	return logstore.RunState{Found: true, UID: run.UID, Attempt: run.Status.Attempt}, nil
}
