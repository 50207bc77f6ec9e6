// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=kruntimes.io/kruntimes/apis/kruntimes
// +k8s:defaulter-gen=TypeMeta
// +groupName=kruntimes.io
// +k8s:openapi-model-package=io.kruntimes.v1alpha1

// Package v1alpha1 is the served version of the kruntimes.io API: Runs and
// Runtimes.
package v1alpha1
