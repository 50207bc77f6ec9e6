package runtimepodpermission

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// podCreators answers like RBAC with one RoleBinding: the users in allowed
// may create pods in namespace "team"; it records what it was asked.
type podCreators struct {
	allowed map[string]bool
	err     error
	asked   []authorizer.Attributes
}

func (a *podCreators) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.asked = append(a.asked, attrs)
	if a.err != nil {
		return authorizer.DecisionNoOpinion, "", a.err
	}
	if a.allowed[attrs.GetUser().GetName()] && attrs.GetNamespace() == "team" && attrs.GetVerb() == "create" &&
		attrs.GetAPIGroup() == "" && attrs.GetResource() == "pods" && attrs.GetSubresource() == "" && attrs.IsResourceRequest() {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC policy matched", nil
}

func pool(replicas int32, labels map[string]string) *kruntimes.Runtime {
	return &kruntimes.Runtime{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "pool", Labels: labels},
		Spec:       kruntimes.RuntimeSpec{Replicas: &replicas},
	}
}

func attributes(resource, subresource string, op admission.Operation, u user.Info) admission.Attributes {
	var obj, old runtime.Object = pool(1, nil), nil
	if op == admission.Update {
		obj, old = pool(2, nil), pool(1, nil)
	}
	return attributesFor(resource, subresource, op, obj, old, u)
}

func attributesFor(resource, subresource string, op admission.Operation, obj, old runtime.Object, u user.Info) admission.Attributes {
	gr := kruntimes.Resource(resource)
	return admission.NewAttributesRecord(obj, old,
		schema.GroupVersionKind{Group: gr.Group, Version: "v1alpha1", Kind: "Runtime"}, "team", "pool",
		gr.WithVersion("v1alpha1"), subresource, op, nil, false, u)
}

func TestValidate(t *testing.T) {
	alice := &user.DefaultInfo{Name: "alice", UID: "a-1", Groups: []string{"devs", user.AllAuthenticated},
		Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=ab"}}}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{user.AllAuthenticated}}
	tests := []struct {
		name      string
		attrs     admission.Attributes
		authzErr  error
		wantCode  int32
		wantAsked bool
	}{
		{name: "creating a Runtime as a user who may create Pods is allowed", attrs: attributes("runtimes", "", admission.Create, alice), wantAsked: true},
		{name: "updating a Runtime as a user who may create Pods is allowed", attrs: attributes("runtimes", "", admission.Update, alice), wantAsked: true},
		{name: "creating a Runtime as a user who may not create Pods is forbidden (403)", attrs: attributes("runtimes", "", admission.Create, bob), wantCode: http.StatusForbidden, wantAsked: true},
		{name: "updating a Runtime's spec as a user who may not create Pods is forbidden (403)", attrs: attributes("runtimes", "", admission.Update, bob), wantCode: http.StatusForbidden, wantAsked: true},
		{name: "updating only a Runtime's metadata (finalizers, owners) is not checked: it makes no Pods", attrs: attributesFor("runtimes", "", admission.Update, pool(1, map[string]string{"a": "b"}), pool(1, nil), bob)},
		{name: "a request without a user is forbidden (403)", attrs: attributes("runtimes", "", admission.Create, nil), wantCode: http.StatusForbidden},
		{name: "writing runtimes/status is not checked (the controllers write it)", attrs: attributes("runtimes", "status", admission.Update, bob)},
		{name: "creating a Run is not checked", attrs: attributes("runs", "", admission.Create, bob)},
		{name: "an authorizer that cannot answer fails the write with 500, never allows it", attrs: attributes("runtimes", "", admission.Create, bob), authzErr: errors.New("connection refused"), wantCode: http.StatusInternalServerError, wantAsked: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			authz := &podCreators{allowed: map[string]bool{"alice": true}, err: tc.authzErr}
			p := New()
			p.SetUnconditionalAuthorizer(authz)
			require.NoError(t, p.ValidateInitialization())

			err := p.Validate(context.Background(), tc.attrs, nil)
			if tc.wantCode == 0 {
				assert.NoError(t, err)
			} else {
				require.Error(t, err)
				status, ok := err.(apierrors.APIStatus)
				require.True(t, ok, "want an API error, got %T %v", err, err)
				assert.Equal(t, tc.wantCode, status.Status().Code, "%v", err)
			}
			if !tc.wantAsked {
				assert.Empty(t, authz.asked)
				return
			}
			require.Len(t, authz.asked, 1)
			asked := authz.asked[0]
			assert.Equal(t, tc.attrs.GetUserInfo(), asked.GetUser(), "the SubjectAccessReview is for the requesting user: name, UID, groups and extra")
			if tc.wantCode == http.StatusForbidden {
				assert.Contains(t, err.Error(), `permission to create pods in namespace "team"`)
				assert.Contains(t, err.Error(), `user "bob"`)
			}
		})
	}
}

func TestValidateInitializationNeedsAnAuthorizer(t *testing.T) {
	assert.Error(t, New().ValidateInitialization())
}
