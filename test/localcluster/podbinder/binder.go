package podbinder

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Binder binds unscheduled Pods to one node.
type Binder struct {
	client   kubernetes.Interface
	nodeName string
	factory  informers.SharedInformerFactory
	pods     corelisters.PodLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]

	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// New returns a Binder that acts with the given client configuration, which
// should carry the system:kube-scheduler identity.
func New(cfg *rest.Config, nodeName string) (*Binder, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "").String()
		}))
	podInformer := factory.Core().V1().Pods()
	broadcaster := record.NewBroadcaster()
	b := &Binder{
		broadcaster: broadcaster,
		recorder:    broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: corev1.DefaultSchedulerName}),
		client:      client,
		nodeName:    nodeName,
		factory:     factory,
		pods:        podInformer.Lister(),
		synced:      podInformer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "podbinder"}),
	}
	_, err = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    b.enqueue,
		UpdateFunc: func(_, obj any) { b.enqueue(obj) },
	})
	return b, err
}

func (b *Binder) enqueue(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		b.queue.Add(cache.MetaObjectToName(pod))
	}
}

// Run binds Pods until ctx is done.
func (b *Binder) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer b.queue.ShutDown()
	logger := klog.FromContext(ctx).WithName("podbinder")
	ctx = klog.NewContext(ctx, logger)
	b.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: b.client.CoreV1().Events("")})
	defer b.broadcaster.Shutdown()
	b.factory.Start(ctx.Done())
	defer b.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), b.synced) {
		return
	}
	logger.V(2).Info("Binding unscheduled Pods", "node", b.nodeName)
	go wait.UntilWithContext(ctx, b.worker, time.Second)
	<-ctx.Done()
}

func (b *Binder) worker(ctx context.Context) {
	for b.processNextWorkItem(ctx) {
	}
}

func (b *Binder) processNextWorkItem(ctx context.Context) bool {
	key, quit := b.queue.Get()
	if quit {
		return false
	}
	defer b.queue.Done(key)
	if err := b.sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Binding Pod", "pod", key)
		b.queue.AddRateLimited(key)
		return true
	}
	b.queue.Forget(key)
	return true
}

func (b *Binder) sync(ctx context.Context, key cache.ObjectName) error {
	pod, err := b.pods.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return nil
	}
	if pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		return nil
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: b.nodeName},
	}
	err = b.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Already bound or gone.
		return nil
	}
	if err != nil {
		return fmt.Errorf("binding %s to %s: %w", klog.KObj(pod), b.nodeName, err)
	}
	b.recorder.Eventf(pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, b.nodeName)
	klog.FromContext(ctx).V(2).Info("Bound Pod", "pod", klog.KObj(pod), "node", b.nodeName)
	return nil
}
