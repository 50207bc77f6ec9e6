package options

import (
	"io"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"

	"kruntimes.io/kruntimes/admission/runtimepodpermission"
)

func TestTenancyAdmissionIsEnabledInOrder(t *testing.T) {
	admission := NewServerOptions(io.Discard, io.Discard).RecommendedOptions.Admission
	order := admission.RecommendedPluginOrder
	at := func(name string) int {
		i := slices.Index(order, name)
		assert.GreaterOrEqual(t, i, 0, "%s is enabled", name)
		return i
	}
	assert.Equal(t, at(lifecycle.PluginName)+1, at(runtimepodpermission.PluginName),
		"RuntimePodPermission right after NamespaceLifecycle, before webhooks")
	assert.Less(t, at(validatingwebhook.PluginName), at(resourcequota.PluginName))
	assert.Equal(t, len(order)-1, at(resourcequota.PluginName), "ResourceQuota last, as in kube-apiserver")
	assert.False(t, admission.DefaultOffPlugins.Has(runtimepodpermission.PluginName))
	assert.False(t, admission.DefaultOffPlugins.Has(resourcequota.PluginName))
}
