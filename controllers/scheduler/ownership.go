package scheduler

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appslisters "k8s.io/client-go/listers/apps/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/runtimepod"
)

// excludedNotOwned counts the Pods that carry a Runtime's label but are not
// Pods of the Deployment the runtime controller made for it.
const excludedNotOwned = "not a Pod of the Runtime's Deployment"

// ownership tells the Runtime's own Pods from Pods that only carry its
// label: anyone who can create Pods in the namespace can label one, and a
// Run placed on it hands its env and source to that Pod.
type ownership struct {
	replicaSets appslisters.ReplicaSetLister
	deployments appslisters.DeploymentLister
}

// check returns nil when pod is controlled by a ReplicaSet that is
// controlled by the Deployment the runtime controller made for rt, which
// is controlled by rt; the UID of each controller is checked, so an
// object re-created under an owner's name does not inherit its Pods. The
// error says which link fails. It reads only the informers' caches.
func (o ownership) check(pod *corev1.Pod, rt *v1alpha1.Runtime) error {
	podRef := metav1.GetControllerOf(pod)
	if err := refersTo(podRef, appsv1.GroupName, "ReplicaSet", ""); err != nil {
		return fmt.Errorf("Pod %s: %w", pod.Name, err)
	}
	rs, err := o.replicaSets.ReplicaSets(pod.Namespace).Get(podRef.Name)
	if err != nil {
		return fmt.Errorf("Pod %s: ReplicaSet %s: %w", pod.Name, podRef.Name, err)
	}
	if rs.UID != podRef.UID {
		return fmt.Errorf("Pod %s: its controller ReplicaSet %s has uid %s, the one of that name now %s", pod.Name, podRef.Name, podRef.UID, rs.UID)
	}
	name := runtimepod.DeploymentName(rt.Name)
	rsRef := metav1.GetControllerOf(rs)
	if err := refersTo(rsRef, appsv1.GroupName, "Deployment", name); err != nil {
		return fmt.Errorf("ReplicaSet %s: %w", rs.Name, err)
	}
	d, err := o.deployments.Deployments(pod.Namespace).Get(name)
	if err != nil {
		return fmt.Errorf("ReplicaSet %s: Deployment %s: %w", rs.Name, name, err)
	}
	if d.UID != rsRef.UID {
		return fmt.Errorf("ReplicaSet %s: its controller Deployment %s has uid %s, the one of that name now %s", rs.Name, name, rsRef.UID, d.UID)
	}
	dRef := metav1.GetControllerOf(d)
	if err := refersTo(dRef, v1alpha1.GroupName, "Runtime", rt.Name); err != nil {
		return fmt.Errorf("Deployment %s: %w", d.Name, err)
	}
	if dRef.UID != rt.UID {
		return fmt.Errorf("Deployment %s: its controller Runtime %s has uid %s, the Runtime now %s", d.Name, rt.Name, dRef.UID, rt.UID)
	}
	return nil
}

// refersTo checks that ref is a controller reference to a kind of group,
// named name unless name is empty.
func refersTo(ref *metav1.OwnerReference, group, kind, name string) error {
	if ref == nil {
		return fmt.Errorf("no controller, want %s %s", kind, name)
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != group || ref.Kind != kind {
		return fmt.Errorf("controlled by %s %s (%s), want a %s of %s", ref.Kind, ref.Name, ref.APIVersion, kind, group)
	}
	if name != "" && ref.Name != name {
		return fmt.Errorf("controlled by %s %s, want %s", ref.Kind, ref.Name, name)
	}
	return nil
}
