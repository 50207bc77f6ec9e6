package embedded

// Support for the AllowUnsafeMalformedObjectDeletion feature: with it, a
// value that cannot be transformed or decoded is reported as a corrupt
// object (so an admin can delete it with ignoreStoreReadErrorWithClusterBreakingPotential)
// and lists aggregate such errors instead of failing on the first one.
// Adapted from k8s.io/apiserver/pkg/storage/etcd3/corrupt_obj_deleter.go so
// both backends answer the same way.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/value"
)

// maxCorruptObjErrsToAggregate caps the corrupt objects one list reports.
const maxCorruptObjErrsToAggregate = 100

const (
	untransformable = iota + 1
	undecodable
)

var typeToMessage = map[int]string{
	untransformable: "data from the storage is not transformable",
	undecodable:     "object not decodable",
}

// corruptObjectError marks a stored value that cannot be transformed or
// decoded.
type corruptObjectError struct {
	err      error
	errType  int
	revision uint64
}

func (e *corruptObjectError) Unwrap() error { return e.err }
func (e *corruptObjectError) Error() string {
	return fmt.Sprintf("%s revision=%d: %v", typeToMessage[e.errType], e.revision, e.err)
}

// corruptInterpretingTransformer reports every read failure as corrupt.
type corruptInterpretingTransformer struct{ value.Transformer }

func (t *corruptInterpretingTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	out, stale, err := t.Transformer.TransformFromStorage(ctx, data, dataCtx)
	if err != nil {
		err = &corruptObjectError{err: err, errType: untransformable}
	}
	return out, stale, err
}

// listItemErrors collects per-item errors of a list. Append reports whether
// the list must stop.
type listItemErrors interface {
	Append(key string, err error) bool
	Aggregate() error
}

// abortOnFirstError is the behaviour without the feature.
type abortOnFirstError struct{ err error }

func (a *abortOnFirstError) Append(_ string, err error) bool { a.err = err; return true }
func (a *abortOnFirstError) Aggregate() error                { return a.err }

var errTooMany = errors.New("too many errors, the list is truncated")

// corruptObjErrAggregator keeps listing past corrupt objects, up to a limit.
type corruptObjErrAggregator struct {
	errs     []error
	abortErr error
	maxCount int
}

func (a *corruptObjErrAggregator) Append(key string, err error) bool {
	if a.abortErr != nil {
		return true
	}
	var corruptObjErr *corruptObjectError
	if errors.As(err, &corruptObjErr) {
		a.errs = append(a.errs, storage.NewCorruptObjError(key, corruptObjErr))
		if len(a.errs) >= a.maxCount {
			a.abortErr = errTooMany
			return true
		}
		return false
	}
	a.abortErr = err
	return true
}

func (a *corruptObjErrAggregator) Aggregate() error {
	switch {
	case len(a.errs) == 0 && a.abortErr != nil:
		return a.abortErr
	case len(a.errs) > 0:
		return &aggregatedStorageError{errs: utilerrors.NewAggregate(a.errs), abortErr: a.abortErr, resourcePrefix: "list"}
	default:
		return nil
	}
}

// aggregatedStorageError holds the corrupt objects a list met.
type aggregatedStorageError struct {
	resourcePrefix string
	errs           utilerrors.Aggregate
	abortErr       error
}

func (e *aggregatedStorageError) Error() string {
	errs := e.errs.Errors()
	var b strings.Builder
	fmt.Fprintf(&b, "unable to transform or decode %d objects: {\n", len(errs))
	for _, err := range errs {
		fmt.Fprintf(&b, "\t%s\n", err.Error())
	}
	b.WriteString("}")
	if e.abortErr != nil {
		fmt.Fprintf(&b, ", aborted: %v", e.abortErr)
	}
	return b.String()
}

// newAPIStatusError lists every corrupt key as a cause, as etcd3 does.
func (e *aggregatedStorageError) newAPIStatusError(qualifiedResource schema.GroupResource) *apierrors.StatusError {
	errs := e.errs.Errors()
	var causes []metav1.StatusCause
	for _, err := range errs {
		var storageErr *storage.StorageError
		if errors.As(err, &storageErr) {
			causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeUnexpectedServerResponse, Field: storageErr.Key, Message: err.Error()})
		}
	}
	switch {
	case errors.Is(e.abortErr, errTooMany):
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeTooMany, Message: errTooMany.Error()})
	case e.abortErr != nil:
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeUnexpectedServerResponse, Message: e.abortErr.Error()})
	}
	message := fmt.Sprintf("failed to read one or more %s from the storage: %v", qualifiedResource.String(), errs[0])
	if len(errs) > 1 {
		message = fmt.Sprintf("%s (and %d more)", message, len(errs)-1)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusInternalServerError,
		Reason: metav1.StatusReasonStoreReadError,
		Details: &metav1.StatusDetails{
			Group:  qualifiedResource.Group,
			Kind:   qualifiedResource.Resource,
			Name:   e.resourcePrefix,
			Causes: causes,
		},
		Message: message,
	}}
}

// corruptObjectDeleter turns corrupt-object errors into the storage errors
// the registry's unsafe-deletion flow looks for.
type corruptObjectDeleter struct {
	storage.Interface
	groupResource schema.GroupResource
}

func newCorruptObjectDeleter(s storage.Interface, gr schema.GroupResource) storage.Interface {
	return &corruptObjectDeleter{Interface: s, groupResource: gr}
}

func (s *corruptObjectDeleter) Get(ctx context.Context, key string, opts storage.GetOptions, out runtime.Object) error {
	if err := s.Interface.Get(ctx, key, opts, out); err != nil {
		var corruptObjErr *corruptObjectError
		if !errors.As(err, &corruptObjErr) {
			return err
		}
		return storage.NewCorruptObjError(key, corruptObjErr)
	}
	return nil
}

func (s *corruptObjectDeleter) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	err := s.Interface.GetList(ctx, key, opts, listObj)
	var aggregatedErr *aggregatedStorageError
	if errors.As(err, &aggregatedErr) {
		return aggregatedErr.newAPIStatusError(s.groupResource)
	}
	return err
}

// corruptObjectDeletedError is what a watcher reports when it sees the
// deletion of an object whose last value cannot be read.
type corruptObjectDeletedError struct{ err error }

func (e *corruptObjectDeletedError) Error() string {
	return fmt.Sprintf("saw a DELETED event, but object data is corrupt - %v", e.err)
}
func (e *corruptObjectDeletedError) Unwrap() error { return e.err }

func (e *corruptObjectDeletedError) Status() metav1.Status {
	return metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusInternalServerError,
		Reason:  metav1.StatusReasonStoreReadError,
		Message: e.Error(),
	}
}
