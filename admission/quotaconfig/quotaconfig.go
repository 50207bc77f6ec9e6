package quotaconfig

import (
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninitializer "k8s.io/apiserver/pkg/admission/initializer"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// CountedResources are the resources whose object count a ResourceQuota
// can limit, as count/<resource>.kruntimes.io.
var CountedResources = []string{"runs", "runtimes"}

// Configuration returns the quota configuration of kruntimes-apiserver: an
// object count evaluator per counted resource. Admission only adds the
// object being created to the usage in the quota's status; the quota
// controller of kube-controller-manager recounts that usage through
// discovery, as it does for every aggregated resource.
func Configuration() quota.Configuration {
	evaluators := make([]quota.Evaluator, 0, len(CountedResources))
	for _, resource := range CountedResources {
		// No list function: admission never recounts.
		evaluators = append(evaluators, generic.NewObjectCountEvaluator(kruntimes.Resource(resource), nil, ""))
	}
	return generic.NewConfiguration(evaluators, nil)
}

// Initializer hands the quota configuration to the plugins that want it.
// It must run after the generic initializer, which gives the ResourceQuota
// plugin the stop channel it starts its evaluator with.
type Initializer struct {
	Configuration quota.Configuration
}

var _ admission.PluginInitializer = Initializer{}

// Initialize sets the quota configuration of plugin if it wants one.
func (i Initializer) Initialize(plugin admission.Interface) {
	if wants, ok := plugin.(genericadmissioninitializer.WantsQuotaConfiguration); ok {
		wants.SetQuotaConfiguration(i.Configuration)
	}
}
