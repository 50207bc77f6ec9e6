package runtime

import (
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
)

// runtimedHealthPortName names runtimed's health port; 15 characters, the
// limit for port names.
const runtimedHealthPortName = "runtimed-health"

// runtimeKind is the kind owner references to a Runtime carry.
var runtimeKind = v1alpha1.SchemeGroupVersion.WithKind("Runtime")

// RuntimedPolicyRules are what runtimed may do in its Runtime's namespace:
// read and claim Runs (update for its finalizer), write their status,
// hand over the log of each attempt,
// heartbeat through a Lease, and record events. Whoever creates the Role
// must hold these permissions itself, so the controllers' own RBAC includes
// them.
func RuntimedPolicyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runs"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runs/status"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runs/log"}, Verbs: []string{"create"}},
		{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}

// poolLabels select the Pods of a Runtime; the scheduler finds candidates
// by the same label.
func poolLabels(rt *v1alpha1.Runtime) map[string]string {
	return map[string]string{lifecycle.LabelRuntime: rt.Name}
}

func ownedMeta(rt *v1alpha1.Runtime, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       rt.Namespace,
		Labels:          poolLabels(rt),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rt, runtimeKind)},
	}
}

func newServiceAccount(rt *v1alpha1.Runtime) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: ownedMeta(rt, runtimepod.ServiceAccountName(rt.Name))}
}

func newRole(rt *v1alpha1.Runtime) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: ownedMeta(rt, runtimepod.ServiceAccountName(rt.Name)), Rules: RuntimedPolicyRules()}
}

func newRoleBinding(rt *v1alpha1.Runtime) *rbacv1.RoleBinding {
	name := runtimepod.ServiceAccountName(rt.Name)
	return &rbacv1.RoleBinding{
		ObjectMeta: ownedMeta(rt, name),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: rt.Namespace}},
	}
}

// newDeployment returns the Deployment that holds rt's Pods.
// podOptions are what the controller's configuration adds to every Pod.
type podOptions struct {
	invokeTLS bool
	// kruntimesAPI, when set, is where runtimed reaches the kruntimes.io
	// API directly.
	kruntimesAPI *KruntimesAPI
}

func newDeployment(rt *v1alpha1.Runtime, opts podOptions) *appsv1.Deployment {
	template := podTemplate(rt, opts)
	d := &appsv1.Deployment{
		ObjectMeta: ownedMeta(rt, runtimepod.DeploymentName(rt.Name)),
		Spec: appsv1.DeploymentSpec{
			Replicas: replicas(rt),
			Selector: &metav1.LabelSelector{MatchLabels: poolLabels(rt)},
			Template: template,
			Strategy: rolloutStrategy(),
		},
	}
	d.Annotations = map[string]string{lifecycle.AnnotationTemplateHash: templateHash(&template)}
	return d
}

// newPodDisruptionBudget lets a drain or an eviction take at most one Pod of
// the Runtime at a time: the functions of the Pod that goes move to the
// others (planned disruption, docs/api.md) before the next one may go.
func newPodDisruptionBudget(rt *v1alpha1.Runtime) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: ownedMeta(rt, runtimepod.DeploymentName(rt.Name)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: poolLabels(rt)},
		},
	}
}

// rolloutStrategy keeps a Runtime's capacity through a rollout: a new Pod
// is added and Ready before an old one is deleted, so the functions the
// old Pod gives back (planned disruption, docs/api.md) have somewhere to go.
func rolloutStrategy() appsv1.DeploymentStrategy {
	return appsv1.DeploymentStrategy{
		Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			MaxSurge:       ptr.To(intstr.FromInt32(1)),
		},
	}
}

func replicas(rt *v1alpha1.Runtime) *int32 {
	r := int32(1)
	if rt.Spec.Replicas != nil {
		r = *rt.Spec.Replicas
	}
	return &r
}

// podTemplate is the user's template with the pool label, runtimed's
// ServiceAccount, the shared volumes mounted into the runtime container and
// the runtimed sidecar. A user container named runtimed is replaced: the
// sidecar is kruntimes' to define.
func podTemplate(rt *v1alpha1.Runtime, opts podOptions) corev1.PodTemplateSpec {
	t := *rt.Spec.Template.DeepCopy()
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[lifecycle.LabelRuntime] = rt.Name
	t.Spec.ServiceAccountName = runtimepod.ServiceAccountName(rt.Name)
	// The token goes to runtimed alone (apiAccessVolume): user code in the
	// other containers gets no Kubernetes credentials.
	t.Spec.AutomountServiceAccountToken = ptr.To(false)

	for _, name := range []string{runtimepod.VolumeWorkspace, runtimepod.VolumeSocket} {
		if !hasVolume(t.Spec.Volumes, name) {
			t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{
				Name:         name,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			})
		}
	}
	runtimed := runtimedContainer(rt)
	containers := make([]corev1.Container, 0, len(t.Spec.Containers)+1)
	for _, c := range t.Spec.Containers {
		switch c.Name {
		case runtimepod.ContainerRuntimed:
			continue
		case runtimepod.ContainerRuntime:
			c.VolumeMounts = withSharedMounts(c.VolumeMounts)
			c.Env = withCapacity(c.Env, rt.Spec.Capacity.Runs)
			runAsUserOf(runtimed.SecurityContext, c.SecurityContext)
		}
		containers = append(containers, c)
	}
	if api := opts.kruntimesAPI; api != nil {
		runtimed.Args = append(runtimed.Args, "--kruntimes-api-server="+api.Server)
		runtimed.Env = append(runtimed.Env, corev1.EnvVar{Name: runtimepod.EnvKruntimesAPICA, Value: string(api.CA)})
	}
	if opts.invokeTLS {
		// Mounted into runtimed alone: user code never sees the key.
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{
			Name: runtimepod.VolumeRuntimedTLS,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: runtimepod.RuntimedTLSSecretName(rt.Name),
			}},
		})
		runtimed.VolumeMounts = append(runtimed.VolumeMounts, corev1.VolumeMount{
			Name: runtimepod.VolumeRuntimedTLS, MountPath: runtimepod.RuntimedTLSDir, ReadOnly: true,
		})
		runtimed.Args = append(runtimed.Args,
			"--invoke-tls-cert-file="+runtimepod.RuntimedTLSCert,
			"--invoke-tls-key-file="+runtimepod.RuntimedTLSKey,
			"--invoke-client-ca-file="+runtimepod.RuntimedTLSCA)
		runtimed.Ports = append(runtimed.Ports, corev1.ContainerPort{
			Name: "invoke", ContainerPort: runtimepod.RuntimedInvokePort, Protocol: corev1.ProtocolTCP,
		}, corev1.ContainerPort{
			// /metrics, to a scraper's client certificate of the same CA.
			Name: "metrics", ContainerPort: runtimepod.RuntimedMetricsPort, Protocol: corev1.ProtocolTCP,
		})
	}
	t.Spec.Volumes = append(t.Spec.Volumes, RuntimedAPIAccessVolume())
	runtimed.VolumeMounts = append(runtimed.VolumeMounts, corev1.VolumeMount{
		Name: runtimepod.VolumeRuntimedAPIAccess, MountPath: runtimepod.ServiceAccountDir, ReadOnly: true,
	})
	t.Spec.Containers = append(containers, runtimed)
	return t
}

// RuntimedAPIAccessVolume is what the ServiceAccount admission plugin would
// mount into every container (a Pod-bound token, the cluster CA, the
// namespace), built here to be mounted into runtimed alone. The token's Pod
// binding is what confines runtimed to its own Runs and Lease.
func RuntimedAPIAccessVolume() corev1.Volume {
	return corev1.Volume{
		Name: runtimepod.VolumeRuntimedAPIAccess,
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Path: "token", ExpirationSeconds: ptr.To[int64](runtimepod.TokenExpirationSeconds),
				}},
				{ConfigMap: &corev1.ConfigMapProjection{
					LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
				}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
					Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
				}}}},
			},
		}},
	}
}

func runtimedContainer(rt *v1alpha1.Runtime) corev1.Container {
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromInt32(runtimepod.RuntimedHealthPort),
			}},
			PeriodSeconds: period,
		}
	}
	// On SIGTERM runtimed gives its functions back for relocation within
	// the Pod's termination grace.
	drain, shutdown := runtimepod.ShutdownBounds(rt.Spec.Template.Spec.TerminationGracePeriodSeconds)
	return corev1.Container{
		Name:  runtimepod.ContainerRuntimed,
		Image: rt.Spec.RuntimedImage,
		Args: []string{
			"--runtime-socket=" + runtimepod.RuntimeSocket,
			"--workspace-dir=" + runtimepod.WorkspacePath,
			"--capacity=" + strconv.Itoa(int(rt.Spec.Capacity.Runs)),
			"--shutdown-drain-timeout=" + drain.String(),
			"--shutdown-timeout=" + shutdown.String(),
		},
		Env: []corev1.EnvVar{
			fieldEnv(runtimepod.EnvPodName, "metadata.name"),
			fieldEnv(runtimepod.EnvPodNamespace, "metadata.namespace"),
			fieldEnv(runtimepod.EnvPodUID, "metadata.uid"),
			fieldEnv(runtimepod.EnvPodIP, "status.podIP"),
			fieldEnv(runtimepod.EnvRuntime, "metadata.labels['"+lifecycle.LabelRuntime+"']"),
		},
		Ports: []corev1.ContainerPort{{
			Name: runtimedHealthPortName, ContainerPort: runtimepod.RuntimedHealthPort, Protocol: corev1.ProtocolTCP,
		}},
		VolumeMounts: withSharedMounts(nil),
		// runtimed needs no privilege and writes only its volumes. Its user
		// is the Runtime Server's (runAsUserOf): it removes what user code
		// leaves in the shared workspace, which a different user could not.
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		// Readiness gates scheduling, so probe it often; liveness restarts
		// a wedged runtimed, so give it the usual slack.
		ReadinessProbe: probe("/readyz", 2),
		LivenessProbe:  probe("/healthz", 10),
	}
}

// runAsUserOf gives runtimed the user of the runtime container when that
// container names one (the Pod-level securityContext applies to both
// otherwise), so a Runtime whose code runs as non-root has a non-root
// runtimed, as Pod Security's "restricted" level requires of every container.
func runAsUserOf(runtimed, runtime *corev1.SecurityContext) {
	if runtime == nil {
		return
	}
	runtimed.RunAsUser = runtime.RunAsUser
	runtimed.RunAsGroup = runtime.RunAsGroup
	runtimed.RunAsNonRoot = runtime.RunAsNonRoot
}

// withCapacity tells the Runtime Server the Pod's capacity, unless the
// template sets the variable itself.
func withCapacity(env []corev1.EnvVar, runs int32) []corev1.EnvVar {
	for _, e := range env {
		if e.Name == runtimepod.EnvCapacity {
			return env
		}
	}
	return append(slices.Clone(env), corev1.EnvVar{Name: runtimepod.EnvCapacity, Value: strconv.Itoa(int(runs))})
}

// withSharedMounts adds the workspace and socket mounts unless the
// container already mounts that volume or something at that path.
func withSharedMounts(mounts []corev1.VolumeMount) []corev1.VolumeMount {
	for _, want := range []corev1.VolumeMount{
		{Name: runtimepod.VolumeWorkspace, MountPath: runtimepod.WorkspacePath},
		{Name: runtimepod.VolumeSocket, MountPath: runtimepod.SocketDir},
	} {
		present := false
		for _, m := range mounts {
			if m.Name == want.Name || m.MountPath == want.MountPath {
				present = true
				break
			}
		}
		if !present {
			mounts = append(mounts, want)
		}
	}
	return mounts
}

func hasVolume(volumes []corev1.Volume, name string) bool {
	for _, v := range volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

// templateHash is a stable digest of a Pod template: encoding/json writes
// struct fields in order and map keys sorted.
func templateHash(t *corev1.PodTemplateSpec) string {
	data, err := json.Marshal(t)
	if err != nil {
		// A PodTemplateSpec always marshals; an empty hash forces an update.
		return ""
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}
