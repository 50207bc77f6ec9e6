// Package install registers the kruntimes.io API group, internal and served
// versions, into a scheme.
package install

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// Install registers the API group and its versions into scheme.
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(kruntimes.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	utilruntime.Must(scheme.SetVersionPriority(v1alpha1.SchemeGroupVersion))
}
