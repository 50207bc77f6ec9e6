package options

import (
	"slices"

	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"kruntimes.io/kruntimes/admission/quotaconfig"
	"kruntimes.io/kruntimes/admission/runtimepodpermission"
)

// addTenancyAdmission enables the admission plugins that keep one tenant
// within what it was given: RuntimePodPermission (a Runtime is Pods, so
// writing one needs the right to create them) and ResourceQuota (object
// counts of Runs and Runtimes, so one namespace cannot fill the store).
func addTenancyAdmission(o *genericoptions.RecommendedOptions) {
	runtimepodpermission.Register(o.Admission.Plugins)
	resourcequota.Register(o.Admission.Plugins)

	order := o.Admission.RecommendedPluginOrder
	// Right after NamespaceLifecycle, as kube-apiserver orders its own
	// checks before webhooks; ResourceQuota last, as in kube-apiserver, so
	// that usage is charged only for writes every other plugin accepted.
	at := slices.Index(order, lifecycle.PluginName) + 1
	order = slices.Insert(slices.Clone(order), at, runtimepodpermission.PluginName)
	o.Admission.RecommendedPluginOrder = append(order, resourcequota.PluginName)

	previous := o.ExtraAdmissionInitializers
	o.ExtraAdmissionInitializers = func(c *genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
		initializers, err := previous(c)
		if err != nil {
			return nil, err
		}
		return append(initializers, quotaconfig.Initializer{Configuration: quotaconfig.Configuration()}), nil
	}
}
