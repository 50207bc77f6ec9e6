package invokerouter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/toolschema"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	"kruntimes.io/kruntimes/client/tombstone"
)

// RunSource is where the cache reads Runs: the runs storage of this server,
// in-process, through its watch cache.
type RunSource interface {
	rest.Getter
	rest.Lister
	rest.Watcher
}

// ownershipCache knows, from informers, which Pod owns each function Run
// and where that Pod is.
type ownershipCache struct {
	source RunSource
	runs   cache.SharedIndexInformer
	pods   cache.SharedIndexInformer
	// schemas holds the compiled input schemas of the Runs invoked.
	schemas *schemaCache
}

// newOwnershipCache watches Runs in source and Runtime Pods (those labelled
// kruntimes.io/runtime) through kube. The cache keeps function Runs only;
// changes still hears of every Run: of a task Run at each event of its
// watch, and of them all after each list, which may have hidden some.
func newOwnershipCache(source RunSource, kube kubernetes.Interface, changes *routeChanges) *ownershipCache {
	runs := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			internal, err := internalListOptions(options)
			if err != nil {
				return nil, err
			}
			obj, err := source.List(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), internal)
			if list, ok := obj.(*kruntimes.RunList); ok {
				var tasks []*kruntimes.Run
				for i := range list.Items {
					if list.Items[i].Spec.Mode.Function == nil {
						tasks = append(tasks, &list.Items[i])
					}
				}
				// A relist after a broken watch: the task Runs' events
				// in between are lost.
				changes.tasksListed(tasks)
				list.Items = slices.DeleteFunc(list.Items, func(r kruntimes.Run) bool { return r.Spec.Mode.Function == nil })
			}
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			internal, err := internalListOptions(options)
			if err != nil {
				return nil, err
			}
			w, err := source.Watch(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), internal)
			if err != nil {
				return nil, err
			}
			// The watch cache wraps what it sends to share serializations;
			// an in-process reader wants the object. Only function Runs
			// are invoked, and a Run's mode never changes: task Runs,
			// most Runs at scale, are not kept (lookup tells them apart),
			// but their follows on runs/log are told of each event. The
			// watch cache holds the event's Run before it sends it, so a
			// follow woken here reads it there.
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if cached, ok := e.Object.(runtime.CacheableObject); ok {
					e.Object = cached.GetObject()
				}
				if run, ok := e.Object.(*kruntimes.Run); ok && e.Type != watch.Bookmark && run.Spec.Mode.Function == nil {
					changes.taskSeen(run, e.Type == watch.Deleted)
					return e, false
				}
				return e, true
			}), nil
		},
	}, &kruntimes.Run{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	// Routing needs the assignment and readiness, not the source, env or
	// history: keep only that in memory.
	_ = runs.SetTransform(slimRun)

	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = lifecycle.LabelRuntime
	}))
	pods := factory.Core().V1().Pods().Informer()
	_ = pods.SetTransform(slimPod)
	c := &ownershipCache{source: source, runs: runs, pods: pods, schemas: newSchemaCache(maxCachedSchemas, maxCachedSchemaBytes)}
	changes.mu.Lock()
	changes.functionPod = c.functionPod
	changes.mu.Unlock()
	_, _ = runs.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.runDeleted})
	return c
}

// functionPod is the Pod (namespace/name) the function Run key is assigned
// to in the cache, "" when none.
func (c *ownershipCache) functionPod(key string) string {
	obj, exists, err := c.runs.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return ""
	}
	run, ok := obj.(*kruntimes.Run)
	if !ok || run.Status.AssignedPod == "" {
		return ""
	}
	return run.Namespace + "/" + run.Status.AssignedPod
}

// runDeleted drops the compiled schema of a Run that is gone.
func (c *ownershipCache) runDeleted(obj any) {
	if run, ok := tombstone.As[*kruntimes.Run](obj); ok {
		c.schemas.forget(run.UID)
	}
}

func internalListOptions(options metav1.ListOptions) (*metainternalversion.ListOptions, error) {
	internal := &metainternalversion.ListOptions{}
	if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&options, internal, nil); err != nil {
		return nil, fmt.Errorf("convert list options: %w", err)
	}
	return internal, nil
}

// run starts both informers and waits for them to sync.
func (c *ownershipCache) run(ctx context.Context) bool {
	go c.runs.RunWithContext(ctx)
	go c.pods.RunWithContext(ctx)
	return cache.WaitForNamedCacheSyncWithContext(ctx, c.runs.HasSynced, c.pods.HasSynced)
}

func (c *ownershipCache) synced() bool { return c.runs.HasSynced() && c.pods.HasSynced() }

// slimRun keeps of a Run what routing reads, and the input schema that
// invocations are validated against.
func slimRun(obj any) (any, error) {
	run, ok := obj.(*kruntimes.Run)
	if !ok {
		return obj, nil
	}
	slim := &kruntimes.Run{
		ObjectMeta: metav1.ObjectMeta{
			Name: run.Name, Namespace: run.Namespace, UID: run.UID,
			ResourceVersion: run.ResourceVersion, DeletionTimestamp: run.DeletionTimestamp,
		},
		Spec: kruntimes.RunSpec{Runtime: run.Spec.Runtime, Timeout: run.Spec.Timeout},
		Status: kruntimes.RunStatus{
			Phase: run.Status.Phase, Attempt: run.Status.Attempt, StartTime: run.Status.StartTime,
			AssignedPod: run.Status.AssignedPod, AssignedPodUID: run.Status.AssignedPodUID,
		},
	}
	slim.Spec.Mode.Function = &kruntimes.FunctionMode{}
	if f := run.Spec.Mode.Function; f != nil && f.Schema != nil && f.Schema.Input != nil {
		slim.Spec.Mode.Function.Schema = &kruntimes.FunctionSchema{Input: f.Schema.Input}
	}
	for _, t := range []string{lifecycle.ConditionReady, lifecycle.ConditionScheduled} {
		if c := meta.FindStatusCondition(run.Status.Conditions, t); c != nil {
			slim.Status.Conditions = append(slim.Status.Conditions, metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason})
		}
	}
	return slim, nil
}

// slimPod keeps of a Pod what routing reads.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, Labels: pod.Labels,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{PodIP: pod.Status.PodIP},
	}, nil
}

// owner is the Pod that holds a routable function Run, and the Run's
// fencing tuple.
type owner struct {
	runUID  types.UID
	attempt int32
	podUID  types.UID
	podIP   string
	runtime string
	// deadline is when the Run's lifetime ends; zero when it has none.
	deadline time.Time
	// input validates the invocation's body; nil when the Run declares no
	// input schema.
	input *toolschema.Validator
}

// lookup finds the owner of the Run ns/name, whose UID must be uid when uid
// is set. Its errors are those of Router.Route.
func (c *ownershipCache) lookup(ctx context.Context, ns, name string, uid types.UID) (owner, error) {
	obj, exists, err := c.runs.GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !exists {
		return owner{}, c.notCached(ctx, ns, name, uid)
	}
	run := obj.(*kruntimes.Run)
	if uid != "" && run.UID != uid {
		// The name now belongs to another Run: the one addressed is gone.
		return owner{}, notFound(name)
	}
	ready := meta.IsStatusConditionTrue(run.Status.Conditions, lifecycle.ConditionReady)
	switch {
	case run.DeletionTimestamp != nil, lifecycle.IsTerminal(run.Status.Phase):
		return owner{}, ended(run)
	case !lifecycle.IsRoutable(run.Status.Phase) || !ready:
		return owner{}, notReady(run, "is not Ready")
	}
	obj, exists, err = c.pods.GetIndexer().GetByKey(ns + "/" + run.Status.AssignedPod)
	if err != nil || !exists {
		return owner{}, notReady(run, "is assigned to Pod "+run.Status.AssignedPod+", which is gone")
	}
	pod := obj.(*corev1.Pod)
	switch {
	case pod.UID != run.Status.AssignedPodUID:
		return owner{}, notReady(run, "is assigned to an earlier Pod of the name "+pod.Name)
	case pod.DeletionTimestamp != nil:
		return owner{}, notReady(run, "is assigned to Pod "+pod.Name+", which is being deleted")
	case pod.Status.PodIP == "":
		return owner{}, notReady(run, "is assigned to Pod "+pod.Name+", which has no IP")
	}
	o := owner{runUID: run.UID, attempt: run.Status.Attempt, podUID: pod.UID, podIP: pod.Status.PodIP, runtime: pod.Labels[lifecycle.LabelRuntime]}
	if run.Spec.Timeout != nil && run.Status.StartTime != nil {
		o.deadline = run.Status.StartTime.Add(run.Spec.Timeout.Duration)
	}
	if f := run.Spec.Mode.Function; f != nil && f.Schema != nil && f.Schema.Input != nil {
		if o.input, err = c.schemas.validator(run.UID, f.Schema.Input.Raw); err != nil {
			// Validated at create: only a Run stored before that could get here.
			return owner{}, apierrors.NewInternalError(fmt.Errorf("Run %s/%s: spec.mode.function.schema.input: %w", ns, name, err))
		}
	}
	return o, nil
}

// notCached says why a Run the cache does not hold cannot be invoked: it
// is a task, it does not exist, or it was created a moment ago. It reads
// the watch cache (resourceVersion 0), never storage, and only on this
// path of refusals.
func (c *ownershipCache) notCached(ctx context.Context, ns, name string, uid types.UID) error {
	obj, err := c.source.Get(genericapirequest.WithNamespace(ctx, ns), name, &metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return notFound(name)
	}
	run, ok := obj.(*kruntimes.Run)
	switch {
	case !ok || (uid != "" && run.UID != uid):
		return notFound(name)
	case run.Spec.Mode.Function == nil:
		return apierrors.NewBadRequest(fmt.Sprintf("Run %s/%s is a task; only function Runs are invoked", ns, name))
	case run.DeletionTimestamp != nil, lifecycle.IsTerminal(run.Status.Phase):
		return ended(run)
	default:
		return notReady(run, "is not Ready")
	}
}

// notFound answers for a Run that is not there, or not the one addressed.
func notFound(name string) error {
	return apierrors.NewNotFound(kruntimes.Resource("runs"), name)
}

// ended answers for a Run that ended or is being deleted: 409, without
// Retry-After, for no retry will find it invocable again (409 rather than
// 410, which client-go reads as an expired resourceVersion: the Run still
// exists).
func ended(run *kruntimes.Run) error {
	why := fmt.Sprintf("it ended (%s) and is not invoked any more", run.Status.Phase)
	if run.DeletionTimestamp != nil {
		why = "it is being deleted and is not invoked any more"
	}
	return apierrors.NewConflict(kruntimes.Resource("runs"), run.Name, errors.New(why))
}

// notReady answers for a function Run that cannot be routed now: 503, and
// runtimedclient.ErrBecomingReady unless the scheduler parked it (no such Runtime, no
// free slot), which no short wait is likely to change.
func notReady(run *kruntimes.Run, why string) error {
	err := apierrors.NewServiceUnavailable(fmt.Sprintf("Run %s/%s %s; retry shortly", run.Namespace, run.Name, why))
	if parked(run) {
		return err
	}
	return runtimedclient.BecomingReady(err)
}

// parked reports whether the scheduler could not place run and said why.
func parked(run *kruntimes.Run) bool {
	c := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionScheduled)
	return c != nil && c.Status == metav1.ConditionFalse &&
		(c.Reason == lifecycle.ReasonNoCapacity || c.Reason == lifecycle.ReasonRuntimeNotFound)
}
