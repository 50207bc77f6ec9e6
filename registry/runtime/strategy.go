package runtime

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
)

// runtimeStrategy implements create, update and delete of Runtimes: users
// own the spec, the runtime controller owns the status.
type runtimeStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the strategy for the runtimes resource.
func NewStrategy(typer runtime.ObjectTyper) runtimeStrategy {
	return runtimeStrategy{typer, names.SimpleNameGenerator}
}

func (runtimeStrategy) NamespaceScoped() bool { return true }

func (runtimeStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"kruntimes.io/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (runtimeStrategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	rt := obj.(*kruntimes.Runtime)
	rt.Status = kruntimes.RuntimeStatus{}
	rt.Generation = 1
}

func (runtimeStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newRT, oldRT := obj.(*kruntimes.Runtime), old.(*kruntimes.Runtime)
	newRT.Status = oldRT.Status
	if !apiequality.Semantic.DeepEqual(newRT.Spec, oldRT.Spec) {
		newRT.Generation = oldRT.Generation + 1
	}
}

func (runtimeStrategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateRuntime(obj.(*kruntimes.Runtime))
}

func (runtimeStrategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

func (runtimeStrategy) AllowCreateOnUpdate(context.Context) bool { return false }

func (runtimeStrategy) AllowUnconditionalUpdate(context.Context) bool { return true }

func (runtimeStrategy) Canonicalize(runtime.Object) {}

func (runtimeStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateRuntimeUpdate(obj.(*kruntimes.Runtime), old.(*kruntimes.Runtime))
}

func (runtimeStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// runtimeStatusStrategy implements runtimes/status.
type runtimeStatusStrategy struct {
	runtimeStrategy
}

// NewStatusStrategy returns the strategy for the runtimes/status subresource.
func NewStatusStrategy(base runtimeStrategy) runtimeStatusStrategy {
	return runtimeStatusStrategy{base}
}

func (runtimeStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"kruntimes.io/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

func (runtimeStatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newRT, oldRT := obj.(*kruntimes.Runtime), old.(*kruntimes.Runtime)
	newRT.Spec = oldRT.Spec
	newRT.Finalizers = oldRT.Finalizers
	newRT.OwnerReferences = oldRT.OwnerReferences
	newRT.DeletionTimestamp = oldRT.DeletionTimestamp
}

func (runtimeStatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateRuntimeStatusUpdate(obj.(*kruntimes.Runtime), old.(*kruntimes.Runtime))
}

func (runtimeStatusStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
