package chart

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"kruntimes.io/kruntimes/controllers/manager"
)

// The Deployments and ServiceAccounts of the chart.
const (
	apiserverName   = "kruntimes-apiserver"
	controllersName = "kruntimes-controllers"
)

// render renders the chart with args (kruntimes.io served, as on upgrade).
func render(t *testing.T, args ...string) scenario {
	t.Helper()
	out, err := Template(testContext(t), repoRoot, append(args, "--api-versions", "kruntimes.io/v1alpha1/Runtime")...)
	require.NoError(t, err)
	objs, err := Decode(out)
	require.NoError(t, err)
	return scenario{objs: objs}
}

// access is one request RBAC decides: verb on group/resource, cluster-wide
// or in any namespace.
type access struct {
	verb, group, resource string
}

func (a access) String() string { return a.verb + " " + a.resource + "." + a.group }

// controllersOnly are rights the controllers need and serving does not:
// the apiserver's ServiceAccount must hold none of them by default.
var controllersOnly = []access{
	{"create", "apps", "deployments"},
	{"update", "apps", "deployments"},
	{"delete", "", "pods"},
	{"get", "", "secrets"},
	{"create", "", "secrets"},
	{"update", "", "secrets"},
	{"list", "", "secrets"},
	{"create", "", "serviceaccounts"},
	{"create", "rbac.authorization.k8s.io", "roles"},
	{"create", "rbac.authorization.k8s.io", "rolebindings"},
	{"create", "policy", "poddisruptionbudgets"},
	{"update", "coordination.k8s.io", "leases"},
	{"update", "", "events"},
	{"update", "kruntimes.io", "runs/status"},
	{"delete", "kruntimes.io", "runs"},
}

// servingNeeds are what kruntimes-apiserver itself calls: the invoke
// router's informer of Runtime Pods, the admission plugins' and APF's
// reads.
var servingNeeds = []access{
	{"list", "", "pods"},
	{"watch", "", "pods"},
	{"watch", "", "namespaces"},
	{"update", "", "resourcequotas/status"},
	{"watch", "admissionregistration.k8s.io", "validatingadmissionpolicies"},
	{"watch", "flowcontrol.apiserver.k8s.io", "flowschemas"},
	{"patch", "flowcontrol.apiserver.k8s.io", "flowschemas/status"},
	// The Warning Event LogCut on a Run whose log was kept cut.
	{"create", "", "events"},
	{"patch", "", "events"},
}

// TestControllersRunApart: by default the controllers are a Deployment of
// their own, with their own ServiceAccount holding their rights, and the
// network-facing apiserver keeps only what serving needs and neither the
// controllers' rights nor the runtimed CA's key. controllers.hosted puts
// them back in the apiserver, rights and key included.
func TestControllersRunApart(t *testing.T) {
	requireHelm(t)
	for _, tc := range []struct {
		name   string
		args   []string
		hosted bool
	}{
		{"by default", nil, false},
		{"by default, certificates from Secrets", []string{"--set", "tls.type=secret", "--set", "runtimedCA.type=secret", "--set", "apiService.caBundle=unused"}, false},
		{"by default, certificates from cert-manager", []string{"--set", "tls.type=cert-manager"}, false},
		{"hosted", []string{"--set", "controllers.hosted=true"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := render(t, tc.args...)
			apiserver := s.deployment(t)
			apiserverArgs := containerArgs(t, apiserver)
			controllers := s.object("Deployment", controllersName)
			controllersSA := s.object("ServiceAccount", controllersName)
			apiserverRules := s.rulesOf(t, apiserverName)
			for _, a := range servingNeeds {
				assert.True(t, allows(apiserverRules, a), "kruntimes-apiserver may %s", a)
			}

			if tc.hosted {
				assert.Nil(t, controllers, "no Deployment %s", controllersName)
				assert.Nil(t, controllersSA, "no ServiceAccount %s", controllersName)
				assert.NotContains(t, apiserverArgs, "--controllers=false")
				assert.Contains(t, apiserverArgs, "--runtimed-ca-key-file=/var/run/kruntimes/runtimed-ca/tls.key")
				assert.Empty(t, projectedKeys(t, apiserver, "runtimed-ca"), "the hosted runtime controller reads the CA's key")
				for _, a := range controllersNeeds() {
					assert.True(t, allows(apiserverRules, a), "hosted, kruntimes-apiserver may %s", a)
				}
				return
			}

			require.NotNil(t, controllers, "the Deployment %s", controllersName)
			require.NotNil(t, controllersSA, "the ServiceAccount %s", controllersName)
			sa, _, _ := unstructured.NestedString(controllers.Object, "spec", "template", "spec", "serviceAccountName")
			assert.Equal(t, controllersName, sa)
			controllersArgs := containerArgs(t, controllers)
			assert.Contains(t, controllersArgs, "--runtimed-ca-key-file=/var/run/kruntimes/runtimed-ca/tls.key")
			assert.Equal(t, mountedSecret(t, apiserver, "runtimed-ca"), mountedSecret(t, controllers, "runtimed-ca"), "one CA")
			assert.Empty(t, projectedKeys(t, controllers, "runtimed-ca"), "the controllers read the CA's key")

			assert.Contains(t, apiserverArgs, "--controllers=false")
			for _, arg := range apiserverArgs {
				assert.NotContains(t, arg, "--runtimed-ca-key-file", "the apiserver has no use for the CA's key")
			}
			assert.Equal(t, []string{"tls.crt"}, projectedKeys(t, apiserver, "runtimed-ca"), "the apiserver's volume holds the CA certificate, not its key")

			for _, a := range controllersOnly {
				assert.False(t, allows(apiserverRules, a), "kruntimes-apiserver may not %s", a)
			}
			controllersRules := s.rulesOf(t, controllersName)
			for _, a := range controllersNeeds() {
				assert.True(t, allows(controllersRules, a), "kruntimes-controllers may %s", a)
			}
		})
	}
}

// controllersNeeds are the requests manager.PolicyRules grants.
func controllersNeeds() []access {
	var needs []access
	for _, rule := range manager.PolicyRules() {
		for _, group := range rule.APIGroups {
			for _, resource := range rule.Resources {
				for _, verb := range rule.Verbs {
					needs = append(needs, access{verb, group, resource})
				}
			}
		}
	}
	return needs
}

// projectedKeys are the keys a Secret volume of deployment projects (its
// items); none means the whole Secret.
func projectedKeys(t *testing.T, deployment *unstructured.Unstructured, volume string) []string {
	t.Helper()
	volumes, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		v := v.(map[string]any)
		if v["name"] != volume {
			continue
		}
		items, _, _ := unstructured.NestedSlice(v, "secret", "items")
		var keys []string
		for _, item := range items {
			keys = append(keys, item.(map[string]any)["key"].(string))
		}
		return keys
	}
	t.Fatalf("%s mounts no volume %s", deployment.GetName(), volume)
	return nil
}

// rulesOf collects the rules of the chart's ClusterRoles and Roles bound
// to the ServiceAccount kruntimes-system/name. Roles the chart does not
// render (Kubernetes' own, such as system:auth-delegator) are left out.
func (s scenario) rulesOf(t *testing.T, name string) []rbacv1.PolicyRule {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{}
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, obj := range s.kind(kind) {
			var role rbacv1.ClusterRole
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role))
			roles[kind+"/"+obj.GetNamespace()+"/"+obj.GetName()] = role.Rules
		}
	}
	var rules []rbacv1.PolicyRule
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, obj := range s.kind(kind) {
			var binding rbacv1.RoleBinding
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &binding))
			if !slices.ContainsFunc(binding.Subjects, func(sub rbacv1.Subject) bool {
				return sub.Kind == rbacv1.ServiceAccountKind && sub.Namespace == Namespace && sub.Name == name
			}) {
				continue
			}
			roleNamespace := ""
			if binding.RoleRef.Kind == "Role" {
				roleNamespace = binding.Namespace
			}
			rules = append(rules, roles[binding.RoleRef.Kind+"/"+roleNamespace+"/"+binding.RoleRef.Name]...)
		}
	}
	return rules
}

// allows reports whether a rule grants a, for any object name: a rule
// limited to resourceNames does not.
func allows(rules []rbacv1.PolicyRule, a access) bool {
	matches := func(list []string, v string) bool {
		return slices.Contains(list, rbacv1.ResourceAll) || slices.Contains(list, v)
	}
	for _, r := range rules {
		if matches(r.APIGroups, a.group) && matches(r.Resources, a.resource) && matches(r.Verbs, a.verb) && len(r.ResourceNames) == 0 {
			return true
		}
	}
	return false
}
