package fake

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
	testing "k8s.io/client-go/testing"

	kruntimesv1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// Invoke records the invocation as a create of runs/invoke and returns what
// a reactor answers: the fake clientset runs no function.
func (c *fakeRuns) Invoke(ctx context.Context, name string, input []byte, opts typedv1alpha1.InvokeOptions) (*kruntimesv1alpha1.InvokeResult, error) {
	action := testing.NewCreateSubresourceAction(schema.GroupVersionResource{
		Group: kruntimesv1alpha1.SchemeGroupVersion.Group, Version: kruntimesv1alpha1.SchemeGroupVersion.Version, Resource: "runs",
	}, name, "invoke", c.Namespace(), &kruntimesv1alpha1.InvokeResult{})
	obj, err := c.Fake.Invokes(action, &kruntimesv1alpha1.InvokeResult{})
	if obj == nil {
		return nil, err
	}
	return obj.(*kruntimesv1alpha1.InvokeResult), err
}
