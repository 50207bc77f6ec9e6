// Package endpoints publishes the EndpointSlices of the local cluster's
// Services. Pod IPs here are loopback addresses (127.x.y.z), which
// EndpointSlice validation refuses for the IPv4 address type, so
// kube-controller-manager's EndpointSlice controller cannot publish them.
// This publisher writes one slice per Service of address type FQDN instead,
// with each Pod's IP as the name: kube-apiserver's aggregator (with
// --enable-aggregator-routing) reads a slice's first address whatever its
// type and dials it, which is all an APIService needs.
package endpoints

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// slices this publisher owns.
const ManagedBy = "localcluster.kruntimes.io"

// resync bounds how long a missed event delays a slice.
const resync = 5 * time.Second

// Publisher keeps one FQDN EndpointSlice per selector Service.
type Publisher struct {
	client kubernetes.Interface
}

// New returns a publisher writing with client.
func New(client kubernetes.Interface) *Publisher { return &Publisher{client: client} }

// Run publishes until ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(p.client, 0)
	services := factory.Core().V1().Services()
	pods := factory.Core().V1().Pods()
	slicesInf := factory.Discovery().V1().EndpointSlices()
	due := make(chan struct{}, 1)
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger(due) },
		UpdateFunc: func(any, any) { trigger(due) },
		DeleteFunc: func(any) { trigger(due) },
	}
	for _, inf := range []cache.SharedIndexInformer{services.Informer(), pods.Informer()} {
		if _, err := inf.AddEventHandler(kick); err != nil {
			return err
		}
	}
	// Listed, not watched for changes: the publisher is their only writer.
	_ = slicesInf.Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), services.Informer().HasSynced, pods.Informer().HasSynced, slicesInf.Informer().HasSynced) {
		return ctx.Err()
	}
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	for {
		p.sync(ctx, services.Lister(), pods.Lister(), slicesInf.Lister())
		select {
		case <-ctx.Done():
			return nil
		case <-due:
		case <-ticker.C:
		}
	}
}

func trigger(due chan struct{}) {
	select {
	case due <- struct{}{}:
	default:
	}
}

func (p *Publisher) sync(ctx context.Context, services corelisters.ServiceLister, pods corelisters.PodLister, slices discoverylisters.EndpointSliceLister) {
	svcs, _ := services.List(labels.Everything())
	for _, svc := range svcs {
		if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName || svc.DeletionTimestamp != nil {
			continue
		}
		matching, _ := pods.Pods(svc.Namespace).List(labels.SelectorFromSet(svc.Spec.Selector))
		want := Slice(svc, matching)
		if err := p.apply(ctx, slices, want); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Publishing an EndpointSlice", "service", klog.KObj(svc))
		}
	}
}

func (p *Publisher) apply(ctx context.Context, lister discoverylisters.EndpointSliceLister, want *discoveryv1.EndpointSlice) error {
	api := p.client.DiscoveryV1().EndpointSlices(want.Namespace)
	have, err := lister.EndpointSlices(want.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(have.Endpoints, want.Endpoints) && equality.Semantic.DeepEqual(have.Ports, want.Ports) &&
		have.AddressType == want.AddressType {
		return nil
	}
	if have.AddressType != want.AddressType {
		// The address type is immutable.
		if err := api.Delete(ctx, have.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	updated := have.DeepCopy()
	updated.Endpoints, updated.Ports = want.Endpoints, want.Ports
	_, err = api.Update(ctx, updated, metav1.UpdateOptions{})
	return err
}

// Slice is the EndpointSlice of svc given the Pods its selector matches:
// named as the Service, owned by it (garbage-collected with it), one
// endpoint per Pod with an IP that has not ended (Ready as the Pod's Ready
// condition), and each Service port with its target port resolved — a
// named target port through the first Pod that declares it.
func Slice(svc *corev1.Service, pods []*corev1.Pod) *discoveryv1.EndpointSlice {
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      svc.Name,
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints:   []discoveryv1.Endpoint{},
		Ports:       []discoveryv1.EndpointPort{},
	}
	var live []*corev1.Pod
	for _, pod := range pods {
		if pod.Status.PodIP == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		live = append(live, pod)
		ready := podReady(pod) && pod.DeletionTimestamp == nil
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{pod.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{
				Ready:       ptr.To(ready),
				Serving:     ptr.To(podReady(pod)),
				Terminating: ptr.To(pod.DeletionTimestamp != nil),
			},
			NodeName:  ptr.To(pod.Spec.NodeName),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		})
	}
	for _, sp := range svc.Spec.Ports {
		port, ok := targetPort(sp, live)
		if !ok {
			continue
		}
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{
			Name:     ptr.To(sp.Name),
			Port:     ptr.To(port),
			Protocol: ptr.To(sp.Protocol),
		})
	}
	return s
}

// targetPort resolves a Service port's target port: a number as is (the
// Service port when unset), a name through the Pods' container ports.
func targetPort(sp corev1.ServicePort, pods []*corev1.Pod) (int32, bool) {
	switch {
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0:
		return sp.TargetPort.IntVal, true
	case sp.TargetPort.Type == intstr.Int:
		return sp.Port, true
	}
	for _, pod := range pods {
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == sp.TargetPort.StrVal {
					return cp.ContainerPort, true
				}
			}
		}
	}
	return 0, false
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// String describes a slice's endpoints for logs and test messages.
func String(s *discoveryv1.EndpointSlice) string {
	var parts []string
	for _, ep := range s.Endpoints {
		parts = append(parts, fmt.Sprintf("%v ready=%v", ep.Addresses, ptr.Deref(ep.Conditions.Ready, false)))
	}
	return strings.Join(parts, ", ")
}
