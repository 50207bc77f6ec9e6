package quotaconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninitializer "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	quota "k8s.io/apiserver/pkg/quota/v1"
)

func TestConfigurationCountsRunsAndRuntimes(t *testing.T) {
	counted := map[corev1.ResourceName]schema.GroupResource{}
	for _, e := range Configuration().Evaluators() {
		for _, name := range e.MatchingResources([]corev1.ResourceName{"count/runs.kruntimes.io", "count/runtimes.kruntimes.io", "pods"}) {
			counted[name] = e.GroupResource()
		}
	}
	assert.Equal(t, map[corev1.ResourceName]schema.GroupResource{
		"count/runs.kruntimes.io":     {Group: "kruntimes.io", Resource: "runs"},
		"count/runtimes.kruntimes.io": {Group: "kruntimes.io", Resource: "runtimes"},
	}, counted)
	assert.Empty(t, Configuration().IgnoredResources())
}

// wantsQuota records the configuration it is given.
type wantsQuota struct {
	admission.Interface
	got quota.Configuration
}

func (w *wantsQuota) SetQuotaConfiguration(c quota.Configuration) { w.got = c }
func (w *wantsQuota) ValidateInitialization() error               { return nil }

var _ genericadmissioninitializer.WantsQuotaConfiguration = &wantsQuota{}

func TestInitializerHandsTheConfigurationToTheQuotaPlugin(t *testing.T) {
	config := Configuration()
	plugin := &wantsQuota{}
	Initializer{Configuration: config}.Initialize(plugin)
	assert.Same(t, config, plugin.got)

	// The real plugin, after the generic initializer's stop channel.
	real, err := resourcequota.NewResourceQuota(nil, 1)
	require.NoError(t, err)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	real.SetDrainedNotification(stop)
	Initializer{Configuration: config}.Initialize(real)
	err = real.ValidateInitialization()
	require.Error(t, err, "no client or informers yet")
	assert.NotContains(t, err.Error(), "quotaConfiguration")
	assert.NotContains(t, err.Error(), "evaluator")
}
