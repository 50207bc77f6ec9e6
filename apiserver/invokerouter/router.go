package invokerouter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	runregistry "kruntimes.io/kruntimes/registry/run"
)

// Config says how the router reaches Runtime Pods.
type Config struct {
	// Kube reaches the cluster's Pods; nil turns invoke off (a standalone
	// server has no Pods).
	Kube kubernetes.Interface
	// ClientTLS dials runtimed (pki.ClientTLS); nil turns invoke off.
	ClientTLS *tls.Config
}

// Router is the run registry's Router over an ownership cache and a pool
// of runtimed connections.
type Router struct {
	kube  kubernetes.Interface
	conns *runtimedConns
	// off says why invoke is turned off; empty when it is on.
	off string
	// cache is set by Start; until then and until it synced, Route answers
	// that routing is starting.
	cache atomic.Pointer[ownershipCache]
	// changes wakes invocations waiting for a function to become routable,
	// and follows of runs/log waiting for their Run to start or move.
	changes *routeChanges
}

var (
	_ runregistry.Router      = &Router{}
	_ runregistry.RouteWaiter = &Router{}
	_ runregistry.LogRouter   = &Router{}
)

// New returns a router that routes nothing until Start.
func New(cfg Config) *Router {
	switch {
	case cfg.Kube == nil:
		return &Router{off: "invoke needs the cluster's Pods, and this server runs without a cluster (--standalone)"}
	case cfg.ClientTLS == nil:
		return &Router{off: "invoke is not configured: kruntimes-apiserver has no client certificate for runtimed (--runtimed-client-cert-file)"}
	}
	return &Router{kube: cfg.Kube, conns: newRuntimedConns(cfg.ClientTLS, clock.RealClock{}), changes: newRouteChanges()}
}

// Start fills the ownership cache from runs, this server's runs storage
// (which is built with the router, hence given here), and from the
// cluster's Runtime Pods, and keeps it current until ctx ends.
func (r *Router) Start(ctx context.Context, runs RunSource) {
	logger := klog.FromContext(ctx)
	if r.off != "" {
		logger.Info("runs/invoke is off", "why", r.off)
		return
	}
	c := newOwnershipCache(runs, r.kube, r.changes)
	_, _ = c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: r.conns.podUpdated,
		DeleteFunc: r.conns.forgetPod,
	})
	// A function claimed by a Pod is about to be invoked there: connect
	// while it registers, not on its first invocation.
	_, _ = c.runs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.warm(c, obj) },
		UpdateFunc: func(_, cur any) { r.warm(c, cur) },
	})
	_, _ = c.runs.AddEventHandler(r.changes.runHandler())
	_, _ = c.pods.AddEventHandler(r.changes.podHandler())
	r.cache.Store(c)
	go func() {
		if c.run(ctx) {
			logger.Info("runs/invoke ownership cache synced")
		}
		<-ctx.Done()
		r.conns.close()
	}()
}

// warm opens the connection to the Pod that holds the function Run obj
// while it registers there or serves.
func (r *Router) warm(c *ownershipCache, obj any) {
	run, ok := obj.(*kruntimes.Run)
	if !ok || run.DeletionTimestamp != nil || (run.Status.Phase != lifecycle.Running && run.Status.Phase != lifecycle.Ready) {
		return
	}
	podObj, exists, err := c.pods.GetIndexer().GetByKey(run.Namespace + "/" + run.Status.AssignedPod)
	if err != nil || !exists {
		return
	}
	pod := podObj.(*corev1.Pod)
	if pod.UID != run.Status.AssignedPodUID || pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return
	}
	r.conns.warm(pod.UID, pod.Status.PodIP, pod.Namespace, pod.Labels[lifecycle.LabelRuntime])
}

// ReadyzCheckName names the readiness check of ReadyzCheck.
const ReadyzCheckName = "runs-invoke-routing"

// ReadyzCheck fails until the ownership cache has synced its Runs and
// Runtime Pods, so a starting replica joins its Service only once it can
// route invocations instead of answering each 503; it passes when invoke is
// off, where there is nothing to wait for.
func (r *Router) ReadyzCheck() healthz.HealthChecker {
	return healthz.NamedCheck(ReadyzCheckName, func(*http.Request) error {
		if r.off != "" {
			return nil
		}
		if c := r.cache.Load(); c == nil || !c.synced() {
			return errors.New("the invoke ownership cache has not synced its Runs and Runtime Pods yet")
		}
		return nil
	})
}

// Route implements runregistry.Router.
func (r *Router) Route(ctx context.Context, namespace, name string, uid types.UID) (*runregistry.Route, error) {
	if r.off != "" {
		return nil, notImplemented(r.off)
	}
	c := r.cache.Load()
	if c == nil || !c.synced() {
		return nil, apierrors.NewServiceUnavailable("the invoke routing cache is still starting")
	}
	o, err := c.lookup(ctx, namespace, name, uid)
	if err != nil {
		return nil, err
	}
	client, err := r.conns.client(o.podUID, o.podIP, namespace, o.runtime)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(err.Error())
	}
	return &runregistry.Route{RunUID: o.runUID, Attempt: o.attempt, PodUID: o.podUID, Deadline: o.deadline, Runtimed: client, Input: o.input}, nil
}

// RouteChanged implements runregistry.RouteWaiter from the ownership
// cache's events. With invoke off nothing changes: the channel is never
// closed.
func (r *Router) RouteChanged(namespace, name string) (<-chan struct{}, func()) {
	if r.changes == nil {
		return make(chan struct{}), func() {}
	}
	return r.changes.watch(namespace + "/" + name)
}

// Runtimed implements runregistry.PodRouter from the cache's Pods, with
// the pool's connection of Route: runs/log follows a running task there.
func (r *Router) Runtimed(namespace, pod string, podUID types.UID) (runtimedclient.Interface, error) {
	if r.off != "" {
		return nil, notImplemented(r.off)
	}
	c := r.cache.Load()
	if c == nil || !c.synced() {
		return nil, apierrors.NewServiceUnavailable("the invoke routing cache is still starting")
	}
	obj, exists, err := c.pods.GetIndexer().GetByKey(namespace + "/" + pod)
	if err != nil || !exists {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("Pod %s/%s is not known (yet)", namespace, pod))
	}
	p := obj.(*corev1.Pod)
	switch {
	case p.UID != podUID:
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("Pod %s/%s is not the Pod of UID %s", namespace, pod, podUID))
	case p.Status.PodIP == "":
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("Pod %s/%s has no IP", namespace, pod))
	}
	client, err := r.conns.client(p.UID, p.Status.PodIP, namespace, p.Labels[lifecycle.LabelRuntime])
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(err.Error())
	}
	return client, nil
}

// notImplemented answers every invocation of a server whose invoke is off:
// 501, without Retry-After, for retrying does not turn it on.
func notImplemented(why string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotImplemented, Reason: reasonNotImplemented, Message: why,
	}}
}

// reasonNotImplemented is the reason of a 501; metav1 names none.
const reasonNotImplemented metav1.StatusReason = "NotImplemented"
