package runtime

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/registry/printers"
)

// Storage holds the REST endpoints of runtimes and runtimes/status.
type Storage struct {
	Runtime *REST
	Status  *StatusREST
}

// REST serves runtimes.
type REST struct {
	*genericregistry.Store
}

// NewStorage builds the runtimes and runtimes/status storage over the
// backend that optsGetter selects.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (Storage, error) {
	strategy := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &kruntimes.Runtime{} },
		NewListFunc:               func() runtime.Object { return &kruntimes.RuntimeList{} },
		DefaultQualifiedResource:  kruntimes.Resource("runtimes"),
		SingularQualifiedResource: kruntimes.Resource("runtime"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: tableConvertor,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return Storage{}, err
	}
	statusStrategy := NewStatusStrategy(strategy)
	statusStore := *store
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy
	return Storage{Runtime: &REST{store}, Status: &StatusREST{store: &statusStore}}, nil
}

// ShortNames implements rest.ShortNamesProvider: kubectl get rt.
func (r *REST) ShortNames() []string { return []string{"rt"} }

// Categories implements rest.CategoriesProvider: kubectl get kruntimes.
func (r *REST) Categories() []string { return []string{"kruntimes"} }

// StatusREST serves runtimes/status.
type StatusREST struct {
	store *genericregistry.Store
}

var (
	_ rest.Patcher             = &StatusREST{}
	_ rest.ResetFieldsStrategy = &StatusREST{}
	_ rest.StandardStorage     = &REST{}
)

// New returns an empty Runtime.
func (r *StatusREST) New() runtime.Object { return &kruntimes.Runtime{} }

// Destroy does nothing: the store is shared with the main resource.
func (r *StatusREST) Destroy() {}

// Get retrieves the Runtime, so that PATCH works on the subresource.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update changes only the status of a Runtime.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
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

var tableConvertor = printers.TableConvertor[*kruntimes.Runtime]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Replicas", Type: "integer", Description: "Desired number of warm Pods."},
		{Name: "Ready", Type: "integer", Description: "Pods ready to take Runs."},
		{Name: "Capacity", Type: "integer", Description: "Runs each Pod holds at once."},
	},
	Cells: func(rt *kruntimes.Runtime) []any {
		var replicas int64
		if rt.Spec.Replicas != nil {
			replicas = int64(*rt.Spec.Replicas)
		}
		return []any{replicas, int64(rt.Status.ReadyReplicas), int64(rt.Spec.Capacity.Runs)}
	},
}
