package scheduler

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
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
	if err := madeFromTemplate(pod, rs); err != nil {
		return fmt.Errorf("Pod %s: %w", pod.Name, err)
	}
	return nil
}

// madeFromTemplate returns nil when pod is what rs creates: its template
// hash, and its template's spec with no more than admission adds to a Pod
// (volumes, mounts, tolerations, defaults). A controller reference is only
// a claim that anyone who can create Pods can write, naming the
// ReplicaSet's UID from a list; the spec is what decides which code and
// which ServiceAccount receive a Run's source and env. Resources are not
// compared: an in-place resize changes them and trusts no one new.
func madeFromTemplate(pod *corev1.Pod, rs *appsv1.ReplicaSet) error {
	const hashLabel = appsv1.DefaultDeploymentUniqueLabelKey
	if got, want := pod.Labels[hashLabel], rs.Spec.Template.Labels[hashLabel]; got != want {
		return fmt.Errorf("label %s=%q, its ReplicaSet %s creates %q", hashLabel, got, rs.Name, want)
	}
	want := &rs.Spec.Template.Spec
	if got, want := serviceAccountOf(&pod.Spec), serviceAccountOf(want); got != want {
		return fmt.Errorf("runs as ServiceAccount %q, its ReplicaSet %s's Pods as %q", got, rs.Name, want)
	}
	if len(pod.Spec.EphemeralContainers) > 0 {
		return fmt.Errorf("has ephemeral container %s, which no template makes", pod.Spec.EphemeralContainers[0].Name)
	}
	if err := sameContainers("container", want.Containers, pod.Spec.Containers); err != nil {
		return fmt.Errorf("%w, not as its ReplicaSet %s's template", err, rs.Name)
	}
	if err := sameContainers("init container", want.InitContainers, pod.Spec.InitContainers); err != nil {
		return fmt.Errorf("%w, not as its ReplicaSet %s's template", err, rs.Name)
	}
	wantSpec, gotSpec := want.DeepCopy(), pod.Spec.DeepCopy()
	wantSpec.Resources, gotSpec.Resources = nil, nil
	wantSpec.Containers, gotSpec.Containers = nil, nil
	wantSpec.InitContainers, gotSpec.InitContainers = nil, nil
	if !apiequality.Semantic.DeepDerivative(*wantSpec, *gotSpec) {
		return fmt.Errorf("spec differs from its ReplicaSet %s's template", rs.Name)
	}
	return nil
}

// serviceAccountOf is the ServiceAccount a Pod of spec runs as: the
// ServiceAccount admission plugin names "default" where spec names none.
func serviceAccountOf(spec *corev1.PodSpec) string {
	if spec.ServiceAccountName == "" {
		return "default"
	}
	return spec.ServiceAccountName
}

// sameContainers checks that got holds the containers of want, in order,
// each as its template says or with only what admission adds. What decides
// the code a container runs — image, command, args, env, working
// directory, mounts — must be exactly the template's: DeepDerivative alone
// accepts a longer list, and an appended argument or a mount over a binary
// changes the program.
func sameContainers(what string, want, got []corev1.Container) error {
	if len(got) != len(want) {
		return fmt.Errorf("has %d %ss where %d were made", len(got), what, len(want))
	}
	for i := range want {
		w, g := want[i].DeepCopy(), got[i].DeepCopy()
		w.Resources, g.Resources = corev1.ResourceRequirements{}, corev1.ResourceRequirements{}
		if !apiequality.Semantic.DeepDerivative(*w, *g) || !apiequality.Semantic.DeepEqual(program(w), program(g)) {
			return fmt.Errorf("runs %s %s (image %s)", what, g.Name, g.Image)
		}
	}
	return nil
}

// program is what of c decides the code it runs. The ServiceAccount
// admission plugin's token mount is left out: it adds one to every
// container of a Pod whose template does not turn automounting off, at a
// path no program is read from.
func program(c *corev1.Container) corev1.Container {
	mounts := make([]corev1.VolumeMount, 0, len(c.VolumeMounts))
	for _, m := range c.VolumeMounts {
		if m.MountPath != serviceAccountTokenPath || !m.ReadOnly {
			mounts = append(mounts, m)
		}
	}
	return corev1.Container{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args, WorkingDir: c.WorkingDir,
		Env: c.Env, EnvFrom: c.EnvFrom, VolumeMounts: mounts, VolumeDevices: c.VolumeDevices}
}

// serviceAccountTokenPath is where the ServiceAccount admission plugin
// mounts a Pod's token.
const serviceAccountTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount"

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
