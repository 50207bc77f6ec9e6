package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kruntimes.io/kruntimes/apis/lifecycle"
)

// GroupName is the API group of kruntimes.
const GroupName = "kruntimes.io"

// SchemeGroupVersion is the group version of this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder registers this version's types, defaults and conversions.
	SchemeBuilder      runtime.SchemeBuilder
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds this version to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// Hand-written functions only; generated ones register themselves, so
	// the package compiles before code generation ran.
	localSchemeBuilder.Register(addKnownTypes, addDefaultingFuncs, addFieldLabelConversionFuncs)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&Run{},
		&RunList{},
		&Runtime{},
		&RuntimeList{},
		&RunInvokeOptions{},
		&InvokeResult{},
		&RunLogOptions{},
		&RunFilesOptions{},
		&RunLog{},
		&RunLogUsage{},
		&RunLogList{},
		&RunLogUsageList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

// addFieldLabelConversionFuncs lets list and watch select Runs by the fields
// of lifecycle; without it the server accepts only metadata.name/namespace.
func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("Run"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", "metadata.namespace",
				lifecycle.FieldSpecRuntime, lifecycle.FieldStatusPhase, lifecycle.FieldStatusAssignedPod, lifecycle.FieldStatusAssignedPodUID:
				return label, value, nil
			}
			return "", "", fmt.Errorf("field label %q is not supported for Runs: use one of metadata.name, metadata.namespace, %s, %s, %s, %s",
				label, lifecycle.FieldSpecRuntime, lifecycle.FieldStatusPhase, lifecycle.FieldStatusAssignedPod, lifecycle.FieldStatusAssignedPodUID)
		})
}

// Resource returns a group-qualified resource.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}
