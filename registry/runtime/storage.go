package runtime

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/registry/printers"
	"kruntimes.io/kruntimes/registry/statusrest"
)

// Storage holds the REST endpoints of runtimes and runtimes/status.
type Storage struct {
	Runtime *REST
	Status  *statusrest.REST
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
	return Storage{Runtime: &REST{store}, Status: statusrest.New(store, NewStatusStrategy(strategy))}, nil
}

// ShortNames implements rest.ShortNamesProvider: kubectl get rt.
func (r *REST) ShortNames() []string { return []string{"rt"} }

// Categories implements rest.CategoriesProvider: kubectl get kruntimes.
func (r *REST) Categories() []string { return []string{"kruntimes"} }

var (
	_ rest.StandardStorage    = &REST{}
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)

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
