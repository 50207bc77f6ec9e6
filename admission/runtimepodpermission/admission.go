package runtimepodpermission

import (
	"context"
	"errors"
	"fmt"
	"io"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninitializer "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// PluginName is the name of the plugin in --enable-admission-plugins and
// --disable-admission-plugins.
const PluginName = "RuntimePodPermission"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return New(), nil
	})
}

// Plugin refuses a create, or an update of the spec, of a Runtime by a user
// who may not create Pods in its namespace.
type Plugin struct {
	*admission.Handler
	authorizer authorizer.UnconditionalAuthorizer
}

var (
	_ admission.ValidationInterface                            = &Plugin{}
	_ admission.InitializationValidator                        = &Plugin{}
	_ genericadmissioninitializer.WantsUnconditionalAuthorizer = &Plugin{}
)

// New returns the plugin; it needs an authorizer (SetUnconditionalAuthorizer)
// before use.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetUnconditionalAuthorizer sets the authorizer that answers "may this user
// create Pods here". The server's own is the delegating authorizer: it asks
// kube-apiserver with a SubjectAccessReview for the user, groups, extra and
// UID of the request, and caches the answer briefly (10 s by default, see
// --authorization-webhook-cache-authorized-ttl).
func (p *Plugin) SetUnconditionalAuthorizer(a authorizer.UnconditionalAuthorizer) { p.authorizer = a }

// ValidateInitialization checks that the plugin has an authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil {
		return errors.New(PluginName + " needs an authorizer")
	}
	return nil
}

var runtimes = kruntimes.Resource("runtimes")

// Validate checks a write of a Runtime (not of its status).
func (p *Plugin) Validate(ctx context.Context, attrs admission.Attributes, _ admission.ObjectInterfaces) error {
	if attrs.GetResource().GroupResource() != runtimes || attrs.GetSubresource() != "" {
		return nil
	}
	if attrs.GetOperation() == admission.Update && !specChanged(attrs) {
		// Metadata alone (labels, finalizers, owner references) makes no
		// Pods: the garbage collector, which may not create Pods, must
		// still be able to remove the orphan finalizer.
		return nil
	}
	user := attrs.GetUserInfo()
	if user == nil {
		return admission.NewForbidden(attrs, errors.New("creating a Runtime creates Pods, and the request has no user to check that permission for"))
	}
	podCreate := authorizer.AttributesRecord{
		User:            user,
		Verb:            "create",
		Namespace:       attrs.GetNamespace(),
		APIGroup:        "",
		APIVersion:      "v1",
		Resource:        "pods",
		ResourceRequest: true,
	}
	decision, reason, err := p.authorizer.Authorize(ctx, podCreate)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		// kube-apiserver did not answer: not the user's fault, and not a
		// reason to let the write through.
		return apierrors.NewInternalError(fmt.Errorf("checking whether user %q may create pods in namespace %q for this Runtime: %w", user.GetName(), attrs.GetNamespace(), err))
	}
	msg := fmt.Sprintf("a Runtime's Pods are created from its template, so writing one requires permission to create pods in namespace %q, which user %q does not have; ask for that permission (for example the edit ClusterRole) or have someone who holds it write the Runtime", attrs.GetNamespace(), user.GetName())
	if reason != "" {
		msg += ": " + reason
	}
	return admission.NewForbidden(attrs, errors.New(msg))
}

// specChanged reports whether an update changes a Runtime's spec, from which
// its Pods are made. Anything but two Runtimes counts as a change.
func specChanged(attrs admission.Attributes) bool {
	updated, ok := attrs.GetObject().(*kruntimes.Runtime)
	if !ok {
		return true
	}
	old, ok := attrs.GetOldObject().(*kruntimes.Runtime)
	if !ok {
		return true
	}
	return !apiequality.Semantic.DeepEqual(old.Spec, updated.Spec)
}
