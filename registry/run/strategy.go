package run

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// runStrategy implements create, update and delete of Runs: users own the
// spec, kruntimes owns the status.
type runStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the strategy for the runs resource.
func NewStrategy(typer runtime.ObjectTyper) runStrategy {
	return runStrategy{typer, names.SimpleNameGenerator}
}

func (runStrategy) NamespaceScoped() bool { return true }

// GetResetFields keeps server-side apply from claiming status through the
// main resource.
func (runStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"kruntimes.io/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForCreate starts every Run Pending on its first attempt, whatever
// status the client sent.
func (runStrategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	run := obj.(*kruntimes.Run)
	run.Status = kruntimes.RunStatus{Phase: lifecycle.Pending, Attempt: 1}
	run.Generation = 1
	compactSchemas(&run.Spec)
}

// compactSchemas stores a function's schemas as compact JSON, as the JSON
// encoding of the object would, so that a protobuf client's whitespace
// neither costs storage nor makes an unchanged schema look changed to the
// immutability check. A schema that is not JSON is left for validation to
// refuse.
func compactSchemas(spec *kruntimes.RunSpec) {
	f := spec.Mode.Function
	if f == nil || f.Schema == nil {
		return
	}
	for _, raw := range []*runtime.RawExtension{f.Schema.Input, f.Schema.Output} {
		if raw == nil || len(raw.Raw) == 0 {
			continue
		}
		var compact bytes.Buffer
		if json.Compact(&compact, raw.Raw) == nil {
			raw.Raw = compact.Bytes()
		}
	}
}

// PrepareForUpdate ignores status changes sent to the main resource and bumps
// the generation when the spec changed.
func (runStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newRun, oldRun := obj.(*kruntimes.Run), old.(*kruntimes.Run)
	newRun.Status = oldRun.Status
	compactSchemas(&newRun.Spec)
	if !apiequality.Semantic.DeepEqual(newRun.Spec, oldRun.Spec) {
		newRun.Generation = oldRun.Generation + 1
	}
}

func (runStrategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateRun(obj.(*kruntimes.Run))
}

func (runStrategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

func (runStrategy) AllowCreateOnUpdate(context.Context) bool { return false }

func (runStrategy) AllowUnconditionalUpdate(context.Context) bool { return true }

func (runStrategy) Canonicalize(runtime.Object) {}

func (runStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateRunUpdate(obj.(*kruntimes.Run), old.(*kruntimes.Run))
}

func (runStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// runStatusStrategy implements runs/status: kruntimes components move the
// phase through the lifecycle table; spec and metadata stay as they were,
// and status.endpoint is the server's.
type runStatusStrategy struct {
	runStrategy
	endpoint Endpoint
}

// NewStatusStrategy returns the strategy for the runs/status subresource;
// endpoint is what a Ready function Run advertises.
func NewStatusStrategy(base runStrategy, endpoint Endpoint) runStatusStrategy {
	return runStatusStrategy{base, endpoint}
}

func (runStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"kruntimes.io/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

func (s runStatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newRun, oldRun := obj.(*kruntimes.Run), old.(*kruntimes.Run)
	newRun.Spec = oldRun.Spec
	// A writer says whether the Run has an endpoint (runtimed sets one when
	// the function is Ready); which URL and CA is the server's to say. A
	// terminal Run's status is frozen, endpoint included.
	if newRun.Status.Endpoint != nil && !lifecycle.IsTerminal(oldRun.Status.Phase) {
		newRun.Status.Endpoint = s.endpoint.of(newRun)
	}
	// Finalizers and owner references are changed through the main resource;
	// a status writer working from a stale copy must not drop them.
	newRun.Finalizers = registrationCleanup(oldRun, newRun.Status.Phase)
	newRun.OwnerReferences = oldRun.OwnerReferences
	newRun.DeletionTimestamp = oldRun.DeletionTimestamp
}

// registrationCleanup returns the finalizers of old as its status moves to
// phase: a function Run gets kruntimes.io/registration-cleanup in the same
// write that claims it for its Pod, before anything of it exists there, and
// loses it when it goes back to Pending, when nothing of it may remain on a
// Pod (its runtimed released it, or recovery fenced the Pod). Its runtimed
// removes it once a Run that ended or is deleted is cleaned up. Done here,
// the claim needs no second write, and the rule holds whoever writes.
func registrationCleanup(old *kruntimes.Run, phase lifecycle.Phase) []string {
	if old.Spec.Mode.Function == nil || phase == old.Status.Phase {
		return old.Finalizers
	}
	has := slices.Contains(old.Finalizers, lifecycle.FinalizerRegistrationCleanup)
	switch {
	case phase == lifecycle.Running && old.Status.Phase == lifecycle.Scheduled && !has:
		return append(slices.Clone(old.Finalizers), lifecycle.FinalizerRegistrationCleanup)
	case phase == lifecycle.Pending && has:
		return slices.DeleteFunc(slices.Clone(old.Finalizers), func(f string) bool { return f == lifecycle.FinalizerRegistrationCleanup })
	}
	return old.Finalizers
}

func (runStatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateRunStatusUpdate(obj.(*kruntimes.Run), old.(*kruntimes.Run))
}

func (runStatusStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// GetAttrs returns the labels and selectable fields of a Run.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	run, ok := obj.(*kruntimes.Run)
	if !ok {
		return nil, nil, fmt.Errorf("not a Run: %T", obj)
	}
	return labels.Set(run.Labels), SelectableFields(run), nil
}

// SelectableFields are the fields list and watch may select Runs by;
// status.assignedPod lets each runtimed watch only its own Runs.
func SelectableFields(run *kruntimes.Run) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		lifecycle.FieldSpecRuntime:          run.Spec.Runtime,
		lifecycle.FieldStatusPhase:          string(run.Status.Phase),
		lifecycle.FieldStatusAssignedPod:    run.Status.AssignedPod,
		lifecycle.FieldStatusAssignedPodUID: string(run.Status.AssignedPodUID),
	}, &run.ObjectMeta, true)
}

// Match returns the selection predicate for label and field selectors over
// Runs, indexed by assigned Pod.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label:       label,
		Field:       field,
		GetAttrs:    GetAttrs,
		IndexFields: []string{lifecycle.FieldStatusAssignedPod},
	}
}

// AssignedPodIndexFunc indexes Runs by assigned Pod for the watch cache.
func AssignedPodIndexFunc(obj any) ([]string, error) {
	run, ok := obj.(*kruntimes.Run)
	if !ok {
		return nil, fmt.Errorf("not a Run: %T", obj)
	}
	return []string{run.Status.AssignedPod}, nil
}

// AssignedPodTriggerFunc routes watch events by assigned Pod.
func AssignedPodTriggerFunc(obj runtime.Object) string {
	return obj.(*kruntimes.Run).Status.AssignedPod
}
