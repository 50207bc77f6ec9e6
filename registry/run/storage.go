package run

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/registry/printers"
	logstore "kruntimes.io/kruntimes/registry/runlog"
	"kruntimes.io/kruntimes/registry/statusrest"
)

// Storage holds the REST endpoints of runs and its subresources.
type Storage struct {
	Run    *REST
	Status *statusrest.REST
	Invoke *InvokeREST
	Log    *LogREST
	Files  *FilesREST
}

// REST serves runs.
type REST struct {
	*genericregistry.Store
}

// NewStorage builds the runs and runs/status storage over the backend that
// optsGetter selects, runs/invoke over router within invoke's bounds, and
// runs/log's follows and runs/files over logs; endpoint is what Ready function Runs
// advertise in status.endpoint; logSettings bound the kept logs.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, router Router, logs LogRouter, invoke InvokeSettings, endpoint Endpoint, logSettings LogSettings) (Storage, error) {
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
	kept, err := logstore.NewStore(optsGetter, logSettings.Limits)
	if err != nil {
		return Storage{}, err
	}
	store.AfterDelete = deleteLogs(kept)
	registerLogMetrics()

	return Storage{
		Run:    &REST{store},
		Status: statusrest.New(store, NewStatusStrategy(strategy, endpoint)),
		Invoke: newInvokeREST(router, invoke),
		Log:    &LogREST{router: logs, runs: store, logs: kept, limits: logSettings.Limits, codecs: serializer.NewCodecFactory(scheme), events: logSettings.Events},
		Files:  &FilesREST{router: logs, runs: store},
	}, nil
}

// LogSettings configure runs/log's kept logs.
type LogSettings struct {
	// Limits bound the kept logs.
	Limits logstore.Limits
	// Events records a Warning Event (lifecycle.ReasonLogCut) on a Run
	// whose log was kept cut; nil records none.
	Events record.EventRecorder
}

// ShortNames implements rest.ShortNamesProvider: kubectl get rn.
func (r *REST) ShortNames() []string { return []string{"rn"} }

// Categories implements rest.CategoriesProvider: kubectl get kruntimes.
func (r *REST) Categories() []string { return []string{"kruntimes"} }

var (
	_ rest.StandardStorage    = &REST{}
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)

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
