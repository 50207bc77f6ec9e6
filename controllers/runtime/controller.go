package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	policyinformers "k8s.io/client-go/informers/policy/v1"
	rbacinformers "k8s.io/client-go/informers/rbac/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	informers "kruntimes.io/kruntimes/client/informers/externalversions/kruntimes/v1alpha1"
	listers "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/tombstone"
)

// Event reasons on a Runtime.
const (
	eventCreated = "Created"
	eventUpdated = "Updated"
)

// Controller keeps each Runtime's Deployment, ServiceAccount, Role and
// RoleBinding as the Runtime says, and its status as the Deployment is.
type Controller struct {
	kubeClient kubernetes.Interface
	client     versioned.Interface
	recorder   record.EventRecorder

	runtimes        listers.RuntimeLister
	deployments     appslisters.DeploymentLister
	budgets         policylisters.PodDisruptionBudgetLister
	serviceAccounts corelisters.ServiceAccountLister
	roles           rbaclisters.RoleLister
	roleBindings    rbaclisters.RoleBindingLister
	synced          []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
	clock clock.Clock
	// runtimedTLS is nil when Runtime Pods get no invoke TLS (invoke off).
	runtimedTLS *RuntimedTLS
	// kruntimesAPI, when set, is where runtimed reaches the kruntimes.io API.
	kruntimesAPI *KruntimesAPI
}

// New returns a controller fed by the given informers. The kube informers
// may be filtered to objects labelled kruntimes.io/runtime: everything this
// controller creates carries that label, and create tells an unlabelled
// object in the way from one the informers have not caught up with.
func New(ctx context.Context,
	runtimeInformer informers.RuntimeInformer,
	deploymentInformer appsinformers.DeploymentInformer,
	serviceAccountInformer coreinformers.ServiceAccountInformer,
	roleInformer rbacinformers.RoleInformer,
	roleBindingInformer rbacinformers.RoleBindingInformer,
	budgetInformer policyinformers.PodDisruptionBudgetInformer,
	kubeClient kubernetes.Interface,
	client versioned.Interface,
	recorder record.EventRecorder,
	opts ...Option,
) (*Controller, error) {
	registerMetrics()
	c := &Controller{
		kubeClient:      kubeClient,
		client:          client,
		recorder:        recorder,
		runtimes:        runtimeInformer.Lister(),
		deployments:     deploymentInformer.Lister(),
		serviceAccounts: serviceAccountInformer.Lister(),
		roles:           roleInformer.Lister(),
		roleBindings:    roleBindingInformer.Lister(),
		budgets:         budgetInformer.Lister(),
		synced: []cache.InformerSynced{
			runtimeInformer.Informer().HasSynced,
			deploymentInformer.Informer().HasSynced,
			serviceAccountInformer.Informer().HasSynced,
			roleInformer.Informer().HasSynced,
			roleBindingInformer.Informer().HasSynced,
			budgetInformer.Informer().HasSynced,
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kruntimes_runtime"},
		),
		clock: clock.RealClock{},
	}
	for _, opt := range opts {
		opt(c)
	}
	logger := klog.FromContext(ctx)
	if _, err := runtimeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueue(logger, obj) },
		UpdateFunc: func(_, obj any) { c.enqueue(logger, obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching Runtimes: %w", err)
	}
	// A change to, or the deletion of, an owned object re-syncs its Runtime,
	// which puts it back as it should be.
	owned := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueOwner,
		UpdateFunc: func(_, obj any) { c.enqueueOwner(obj) },
		DeleteFunc: c.enqueueOwner,
	}
	for what, informer := range map[string]cache.SharedIndexInformer{
		"Deployments":          deploymentInformer.Informer(),
		"ServiceAccounts":      serviceAccountInformer.Informer(),
		"Roles":                roleInformer.Informer(),
		"RoleBindings":         roleBindingInformer.Informer(),
		"PodDisruptionBudgets": budgetInformer.Informer(),
	} {
		if _, err := informer.AddEventHandler(owned); err != nil {
			return nil, fmt.Errorf("watching %s of Runtimes: %w", what, err)
		}
	}
	return c, nil
}

// Run processes the queue with workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx)
	logger.Info("Starting Runtime controller")
	var wg sync.WaitGroup
	defer func() {
		logger.Info("Shutting down Runtime controller")
		c.queue.ShutDown()
		wg.Wait()
	}()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return
	}
	for i := 0; i < workers; i++ {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
}

func (c *Controller) enqueue(logger klog.Logger, obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleErrorWithLogger(logger, err, "Cannot key Runtime")
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueOwner(obj any) {
	o, ok := tombstone.As[metav1.Object](obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != runtimeKind.Kind || ref.APIVersion != runtimeKind.GroupVersion().String() {
		return
	}
	c.queue.Add(o.GetNamespace() + "/" + ref.Name)
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := c.clock.Now()
	err := c.sync(ctx, key)
	observeSync(err, c.clock.Since(start))
	if err != nil {
		if apierrors.IsConflict(err) {
			// Routine: a newer copy is on its way to the informer.
			klog.FromContext(ctx).V(4).Info("Conflict, will retry", "key", key, "err", err)
		} else {
			utilruntime.HandleErrorWithContext(ctx, err, "Failed to sync Runtime, will retry", "key", key)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// errNotOwned says an object of a Runtime's pool exists but belongs to
// someone else; the controller leaves it alone and says so.
type errNotOwned struct {
	kind, name string
	owner      *metav1.OwnerReference
}

func (e *errNotOwned) Error() string {
	owner := "no controller"
	if e.owner != nil {
		owner = fmt.Sprintf("%s %s (uid %s)", e.owner.Kind, e.owner.Name, e.owner.UID)
	}
	return fmt.Sprintf("%s %s exists and is controlled by %s, not this Runtime; delete or rename it so kruntimes can create its own", e.kind, e.name, owner)
}

// checkOwned returns errNotOwned unless obj is controlled by rt.
func checkOwned(rt *v1alpha1.Runtime, kind string, obj metav1.Object) error {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.UID != rt.UID {
		return &errNotOwned{kind: kind, name: obj.GetName(), owner: ref}
	}
	return nil
}

// sync reconciles the Runtime of key from what the informers observed. It
// is safe to run any number of times: it creates what is missing, updates
// what differs and writes the status only when it changed.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	rt, err := c.runtimes.Runtimes(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		// Owner references let the garbage collector remove the pool.
		return nil
	}
	if err != nil {
		return err
	}
	if rt.DeletionTimestamp != nil {
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "runtime", klog.KObj(rt))
	ctx = klog.NewContext(ctx, logger)

	deployment, err := c.syncPool(ctx, rt)
	var notOwned *errNotOwned
	if err != nil && !errors.As(err, &notOwned) {
		return err
	}
	problem := ""
	if notOwned != nil {
		problem = notOwned.Error()
		c.recorder.Event(rt, corev1.EventTypeWarning, lifecycle.ReasonResourceConflict, problem)
	}
	if statusErr := c.updateStatus(ctx, rt, deployment, problem); statusErr != nil {
		return statusErr
	}
	// A foreign object may be deleted later; retry with backoff until then.
	return err
}

// syncPool creates or updates the ServiceAccount, Role, RoleBinding and
// Deployment of rt, in that order: Pods naming a missing ServiceAccount are
// rejected by admission, and runtimed should find its permissions in place
// when it starts. It returns the Deployment as last seen.
func (c *Controller) syncPool(ctx context.Context, rt *v1alpha1.Runtime) (*appsv1.Deployment, error) {
	if err := c.syncServiceAccount(ctx, rt); err != nil {
		return nil, err
	}
	if err := c.syncRole(ctx, rt); err != nil {
		return nil, err
	}
	if err := c.syncRoleBinding(ctx, rt); err != nil {
		return nil, err
	}
	if err := c.syncTLSSecret(ctx, rt); err != nil {
		return nil, err
	}
	if err := c.syncPodDisruptionBudget(ctx, rt); err != nil {
		return nil, err
	}
	return c.syncDeployment(ctx, rt)
}

// syncPodDisruptionBudget creates the Runtime's PodDisruptionBudget, or sets
// its spec back when it changed.
func (c *Controller) syncPodDisruptionBudget(ctx context.Context, rt *v1alpha1.Runtime) error {
	want := newPodDisruptionBudget(rt)
	client := c.kubeClient.PolicyV1().PodDisruptionBudgets(rt.Namespace)
	existing, err := c.budgets.PodDisruptionBudgets(rt.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = create(ctx, c, rt, "PodDisruptionBudget", want, client)
		return err
	}
	if err != nil {
		return err
	}
	if err := checkOwned(rt, "PodDisruptionBudget", existing); err != nil {
		return err
	}
	if apiequality.Semantic.DeepEqual(existing.Spec.MaxUnavailable, want.Spec.MaxUnavailable) &&
		existing.Spec.MinAvailable == nil && apiequality.Semantic.DeepEqual(existing.Spec.Selector, want.Spec.Selector) {
		return nil
	}
	update := existing.DeepCopy()
	update.Spec.MaxUnavailable, update.Spec.MinAvailable, update.Spec.Selector = want.Spec.MaxUnavailable, nil, want.Spec.Selector
	_, err = client.Update(ctx, update, metav1.UpdateOptions{})
	return c.updated(ctx, rt, "PodDisruptionBudget", want.Name, err)
}

func (c *Controller) syncServiceAccount(ctx context.Context, rt *v1alpha1.Runtime) error {
	want := newServiceAccount(rt)
	existing, err := c.serviceAccounts.ServiceAccounts(rt.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = create(ctx, c, rt, "ServiceAccount", want, c.kubeClient.CoreV1().ServiceAccounts(rt.Namespace))
		return err
	}
	if err != nil {
		return err
	}
	return checkOwned(rt, "ServiceAccount", existing)
}

func (c *Controller) syncRole(ctx context.Context, rt *v1alpha1.Runtime) error {
	want := newRole(rt)
	existing, err := c.roles.Roles(rt.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = create(ctx, c, rt, "Role", want, c.kubeClient.RbacV1().Roles(rt.Namespace))
		return err
	}
	if err != nil {
		return err
	}
	if err := checkOwned(rt, "Role", existing); err != nil {
		return err
	}
	if apiequality.Semantic.DeepEqual(existing.Rules, want.Rules) {
		return nil
	}
	update := existing.DeepCopy()
	update.Rules = want.Rules
	_, err = c.kubeClient.RbacV1().Roles(rt.Namespace).Update(ctx, update, metav1.UpdateOptions{})
	return c.updated(ctx, rt, "Role", want.Name, err)
}

func (c *Controller) syncRoleBinding(ctx context.Context, rt *v1alpha1.Runtime) error {
	want := newRoleBinding(rt)
	bindings := c.kubeClient.RbacV1().RoleBindings(rt.Namespace)
	existing, err := c.roleBindings.RoleBindings(rt.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = create(ctx, c, rt, "RoleBinding", want, bindings)
		return err
	}
	if err != nil {
		return err
	}
	if err := checkOwned(rt, "RoleBinding", existing); err != nil {
		return err
	}
	if existing.RoleRef != want.RoleRef {
		// roleRef is immutable; replace the binding. The delete event
		// brings the Runtime back here to create it.
		uid := existing.UID
		err := bindings.Delete(ctx, want.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}
	if apiequality.Semantic.DeepEqual(existing.Subjects, want.Subjects) {
		return nil
	}
	update := existing.DeepCopy()
	update.Subjects = want.Subjects
	_, err = bindings.Update(ctx, update, metav1.UpdateOptions{})
	return c.updated(ctx, rt, "RoleBinding", want.Name, err)
}

// syncDeployment creates the Deployment, or updates it when the Runtime's
// template or replicas changed since the last write.
func (c *Controller) syncDeployment(ctx context.Context, rt *v1alpha1.Runtime) (*appsv1.Deployment, error) {
	want := newDeployment(rt, podOptions{invokeTLS: c.runtimedTLS != nil, kruntimesAPI: c.kruntimesAPI})
	deployments := c.kubeClient.AppsV1().Deployments(rt.Namespace)
	existing, err := c.deployments.Deployments(rt.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		created, err := create(ctx, c, rt, "Deployment", want, deployments)
		if err != nil {
			return nil, err
		}
		return created, nil
	}
	if err != nil {
		return nil, err
	}
	if err := checkOwned(rt, "Deployment", existing); err != nil {
		return nil, err
	}
	if !deploymentNeedsUpdate(existing, want) {
		return existing, nil
	}
	update := existing.DeepCopy()
	if update.Annotations == nil {
		update.Annotations = map[string]string{}
	}
	update.Annotations[lifecycle.AnnotationTemplateHash] = want.Annotations[lifecycle.AnnotationTemplateHash]
	if update.Labels == nil {
		update.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		update.Labels[k] = v
	}
	update.Spec.Replicas = want.Spec.Replicas
	update.Spec.Template = want.Spec.Template
	update.Spec.Strategy = want.Spec.Strategy
	updated, err := deployments.Update(ctx, update, metav1.UpdateOptions{})
	if err := c.updated(ctx, rt, "Deployment", want.Name, err); err != nil {
		return nil, err
	}
	return updated, nil
}

// deploymentNeedsUpdate compares what this controller owns of the
// Deployment: the template (by hash), replicas, the rollout strategy and
// the pool label.
func deploymentNeedsUpdate(existing, want *appsv1.Deployment) bool {
	if existing.Annotations[lifecycle.AnnotationTemplateHash] != want.Annotations[lifecycle.AnnotationTemplateHash] {
		return true
	}
	if existing.Spec.Replicas == nil || *existing.Spec.Replicas != *want.Spec.Replicas {
		return true
	}
	if !apiequality.Semantic.DeepEqual(existing.Spec.Strategy, want.Spec.Strategy) {
		return true
	}
	for k, v := range want.Labels {
		if existing.Labels[k] != v {
			return true
		}
	}
	return false
}

// createGetter is what create needs of a typed client.
type createGetter[T metav1.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
}

// create creates want, an object of rt's pool the informer does not have,
// and returns it as the server has it. AlreadyExists means either the
// informer has not caught up or someone else's object holds the name
// without the kruntimes.io/runtime label, which the informers never see:
// only a live read tells them apart. That is rare, so it is not cached.
func create[T metav1.Object](ctx context.Context, c *Controller, rt *v1alpha1.Runtime, kind string, want T, client createGetter[T]) (T, error) {
	name := want.GetName()
	obj, err := client.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		obj, err = client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			// Not found: deleted since; the retry creates it.
			return obj, fmt.Errorf("reading %s %s/%s, which already exists: %w", kind, rt.Namespace, name, err)
		}
		// Ours: the informer's add event requeues the Runtime.
		return obj, checkOwned(rt, kind, obj)
	}
	if err != nil {
		return obj, fmt.Errorf("creating %s %s/%s: %w", kind, rt.Namespace, name, err)
	}
	klog.FromContext(ctx).V(2).Info("Created", "kind", kind, "name", name)
	c.recorder.Eventf(rt, corev1.EventTypeNormal, eventCreated, "Created %s %s", kind, name)
	return obj, nil
}

func (c *Controller) updated(ctx context.Context, rt *v1alpha1.Runtime, kind, name string, err error) error {
	if err != nil {
		return fmt.Errorf("updating %s %s/%s: %w", kind, rt.Namespace, name, err)
	}
	klog.FromContext(ctx).V(2).Info("Updated", "kind", kind, "name", name)
	c.recorder.Eventf(rt, corev1.EventTypeNormal, eventUpdated, "Updated %s %s", kind, name)
	return nil
}

// updateStatus writes rt's status through runtimes/status, with rt's
// resourceVersion, when it differs from what the Deployment says.
func (c *Controller) updateStatus(ctx context.Context, rt *v1alpha1.Runtime, deployment *appsv1.Deployment, problem string) error {
	status := desiredStatus(rt, deployment, problem, c.clock.Now())
	if apiequality.Semantic.DeepEqual(rt.Status, status) {
		return nil
	}
	update := rt.DeepCopy()
	update.Status = status
	_, err := c.client.KruntimesV1alpha1().Runtimes(rt.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{})
	if err != nil {
		// A conflict means a newer Runtime is on its way to the informer.
		return fmt.Errorf("updating status of Runtime %s/%s: %w", rt.Namespace, rt.Name, err)
	}
	klog.FromContext(ctx).V(4).Info("Updated Runtime status", "replicas", status.Replicas, "readyReplicas", status.ReadyReplicas)
	return nil
}
