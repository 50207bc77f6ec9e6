package manager

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	rbacv1 "k8s.io/api/rbac/v1"

	runtimecontroller "kruntimes.io/kruntimes/controllers/runtime"
)

// TestPolicyRulesCoverRuntimed pins that the controllers hold every
// permission they grant runtimed: RBAC refuses to create the Role otherwise.
func TestPolicyRulesCoverRuntimed(t *testing.T) {
	for _, want := range runtimecontroller.RuntimedPolicyRules() {
		for _, group := range want.APIGroups {
			for _, resource := range want.Resources {
				for _, verb := range want.Verbs {
					assert.True(t, allowed(PolicyRules(), group, resource, verb), "%s %s.%s", verb, resource, group)
				}
			}
		}
	}
}

func allowed(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}
