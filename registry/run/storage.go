package run

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/registry/printers"
)

// Storage holds the REST endpoints of runs and its subresources.
type Storage struct {
	Run    *REST
	Status *StatusREST
}

// REST serves runs.
type REST struct {
	*genericregistry.Store
}

// NewStorage builds the runs and runs/status storage over the backend that
// optsGetter selects.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (Storage, error) {
	strategy := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &kruntimes.Run{} },
		NewListFunc:               func() runtime.Object { return &kruntimes.RunList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  kruntimes.Resource("runs"),
		SingularQualifiedResource: kruntimes.Resource("run"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: tableConvertor,
	}
	options := &generic.StoreOptions{
		RESTOptions: optsGetter,
		AttrFunc:    GetAttrs,
		TriggerFunc: map[string]storage.IndexerFunc{lifecycle.FieldStatusAssignedPod: AssignedPodTriggerFunc},
		Indexers:    &cache.Indexers{storage.FieldIndex(lifecycle.FieldStatusAssignedPod): AssignedPodIndexFunc},
	}
	if err := store.CompleteWithOptions(options); err != nil {
		return Storage{}, err
	}

	statusStrategy := NewStatusStrategy(strategy)
	statusStore := *store
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy
	return Storage{Run: &REST{store}, Status: &StatusREST{store: &statusStore}}, nil
}

// ShortNames implements rest.ShortNamesProvider: kubectl get rn.
func (r *REST) ShortNames() []string { return []string{"rn"} }

// Categories implements rest.CategoriesProvider: kubectl get kruntimes.
func (r *REST) Categories() []string { return []string{"kruntimes"} }

// StatusREST serves runs/status.
type StatusREST struct {
	store *genericregistry.Store
}

var (
	_ rest.Patcher             = &StatusREST{}
	_ rest.ResetFieldsStrategy = &StatusREST{}
	_ rest.ShortNamesProvider  = &REST{}
	_ rest.CategoriesProvider  = &REST{}
	_ rest.StandardStorage     = &REST{}
	_ rest.TableConvertor      = &StatusREST{}
)

// New returns an empty Run.
func (r *StatusREST) New() runtime.Object { return &kruntimes.Run{} }

// Destroy does nothing: the store is shared with the main resource.
func (r *StatusREST) Destroy() {}

// Get retrieves the Run, so that PATCH works on the subresource.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update changes only the status of a Run.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Subresources never create the parent.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields implements rest.ResetFieldsStrategy.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the same columns as the main resource.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

var tableConvertor = printers.TableConvertor[*kruntimes.Run]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Runtime", Type: "string", Description: "The Runtime that executes the Run."},
		{Name: "Mode", Type: "string", Description: "Task or Function."},
		{Name: "Phase", Type: "string", Description: "Where the Run is in its lifecycle."},
		{Name: "Pod", Type: "string", Description: "The Runtime Pod the Run is assigned to."},
		{Name: "Attempt", Type: "integer", Description: "The 1-based attempt number."},
	},
	Cells: func(run *kruntimes.Run) []any {
		mode := lifecycle.ModeTask
		if run.Spec.Mode.Function != nil {
			mode = lifecycle.ModeFunction
		}
		return []any{run.Spec.Runtime, string(mode), string(run.Status.Phase), run.Status.AssignedPod, int64(run.Status.Attempt)}
	},
}
