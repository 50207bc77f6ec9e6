package manager

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// PolicyRules are the cluster-wide permissions the controllers need under
// the identity of their kube client config. They include runtimed's rules
// (TestPolicyRulesCoverRuntimed) because RBAC lets only a holder of a permission grant it in a Role. The
// kruntimes.io rules matter when KruntimesConfig goes through
// kube-apiserver (kruntimes-controllers); the API server's loopback is
// privileged. Deploy manifests grant exactly these.
func PolicyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runtimes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runtimes/status"}, Verbs: []string{"update", "patch"}},
		// Owner references with blockOwnerDeletion need this where the
		// OwnerReferencesPermissionEnforcement admission plugin runs.
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runtimes/finalizers"}, Verbs: []string{"update"}},
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runs"}, Verbs: []string{"get", "list", "watch", "update", "patch", "delete"}},
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runs/status"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"runs/log"}, Verbs: []string{"create"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		// A PodDisruptionBudget per Runtime keeps a drain to one Pod at a time.
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		// The scheduler places Runs only on Pods of a Runtime's own
		// ReplicaSets, which it reads from a cache.
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		// delete: recovery deletes a Runtime Pod whose runtimed heartbeat is
		// lost, as the node lifecycle controller evicts the Pods of an
		// unreachable Node; the Pod's deletion is the fence that lets its
		// Runs move. RBAC cannot narrow this to labelled Pods: recovery
		// deletes only Pods labelled kruntimes.io/runtime that hold Runs,
		// with their UID as a precondition.
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
		// Each Runtime's invoke Secret (runtime-<name>-tls), read by name
		// and never listed or watched: the controllers hold no Secrets.
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "update"}},
		// Heartbeats are read everywhere; leader election and runtimed's
		// grant need the write verbs.
		{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}
}
