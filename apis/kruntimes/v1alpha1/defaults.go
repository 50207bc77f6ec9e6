package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultRuntimedImage is the runtimed sidecar image a Runtime gets when it
// names none.
const DefaultRuntimedImage = "kruntimes.io/runtimed:latest"

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_RunSpec defaults a Run to a single attempt.
func SetDefaults_RunSpec(obj *RunSpec) {
	if obj.RetryPolicy == nil {
		obj.RetryPolicy = &RetryPolicy{}
	}
	if obj.RetryPolicy.MaxAttempts == 0 {
		obj.RetryPolicy.MaxAttempts = 1
	}
}

// SetDefaults_RuntimeSpec defaults a Runtime to one Pod holding one Run.
func SetDefaults_RuntimeSpec(obj *RuntimeSpec) {
	if obj.Replicas == nil {
		one := int32(1)
		obj.Replicas = &one
	}
	if obj.Capacity.Runs == 0 {
		obj.Capacity.Runs = 1
	}
	if obj.RuntimedImage == "" {
		obj.RuntimedImage = DefaultRuntimedImage
	}
}
