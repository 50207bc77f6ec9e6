package runtimedrestriction

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// RunGetter reads one Run from this server's storage, in-process.
type RunGetter func(ctx context.Context, namespace, name string) (*kruntimes.Run, error)

// Authorizer decides every kruntimes.io request of a runtimed identity and
// has no opinion on anyone else's, so it goes in front of the delegating
// authorizer in a union: users and controllers are authorized as before,
// and runtimed's requests cost no SubjectAccessReview.
type Authorizer struct {
	getRun RunGetter
}

var _ authorizer.Authorizer = &Authorizer{}

// NewAuthorizer returns the authorizer; getRun answers the ownership of a
// Run named in a get, from storage, so a Run bound a moment ago is never
// refused for a lagging cache.
func NewAuthorizer(getRun RunGetter) *Authorizer {
	return &Authorizer{getRun: getRun}
}

// Verbs runtimed uses on runs and runs/status. Writes are allowed here and
// checked against the stored object by the admission plugin.
var (
	readVerbs  = map[string]bool{"list": true, "watch": true, "get": true}
	writeVerbs = map[string]bool{"update": true, "patch": true}
)

// Authorize implements authorizer.Authorizer.
func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	id, isRuntimed, err := identityOf(attrs.GetUser())
	if !isRuntimed || !attrs.IsResourceRequest() || attrs.GetAPIGroup() != kruntimes.GroupName {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if err != nil {
		return authorizer.DecisionDeny, err.Error(), nil
	}
	if attrs.GetNamespace() != id.Namespace {
		return deny("runtimed of Pod %s/%s may reach only Runs of its namespace", id.Pod.Namespace, id.Pod.Name)
	}
	verb, resource, sub := attrs.GetVerb(), attrs.GetResource(), attrs.GetSubresource()
	if resource == "runs" && sub == "log" {
		// runtimed hands over the log of an attempt it ran and never reads
		// a log: a Runtime Pod runs code of many users.
		if verb != "create" {
			return deny("runtimed of Pod %s/%s may only create runs/log", id.Pod.Namespace, id.Pod.Name)
		}
		return a.authorizeGet(ctx, id, attrs.GetName())
	}
	if resource != "runs" || (sub != "" && sub != "status") {
		return deny("runtimed of Pod %s/%s may reach only runs, runs/status and runs/log", id.Pod.Namespace, id.Pod.Name)
	}
	switch {
	case writeVerbs[verb]:
		// The admission plugin checks the Run against the stored object.
		return authorizer.DecisionAllow, "", nil
	case (verb == "list" || verb == "watch") && sub == "":
		return a.authorizeList(id, attrs)
	case verb == "get":
		return a.authorizeGet(ctx, id, attrs.GetName())
	}
	return deny("runtimed of Pod %s/%s may not %s runs%s", id.Pod.Namespace, id.Pod.Name, verb, subresourceSuffix(sub))
}

// ConditionsAwareAuthorize implements authorizer.Authorizer; every decision
// here is unconditional.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions implements authorizer.Authorizer; it never returns a
// conditional decision, so it has none to evaluate.
func (a *Authorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// authorizeList allows a list or watch that selects this Pod's Runs by
// status.assignedPod and status.assignedPodUID: by name alone, a Pod
// re-created under a deleted Pod's name would see that Pod's Runs. Other
// requirements may narrow it further.
func (a *Authorizer) authorizeList(id Identity, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	requirements, err := attrs.GetFieldSelector()
	if err != nil {
		return deny("runtimed of Pod %s/%s: invalid field selector: %v", id.Pod.Namespace, id.Pod.Name, err)
	}
	var byName, byUID bool
	for _, r := range requirements {
		if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
			continue
		}
		switch r.Field {
		case lifecycle.FieldStatusAssignedPod:
			byName = byName || r.Value == id.Pod.Name
		case lifecycle.FieldStatusAssignedPodUID:
			byUID = byUID || r.Value == string(id.Pod.UID)
		}
	}
	if byName && byUID {
		return authorizer.DecisionAllow, "", nil
	}
	return deny("runtimed of Pod %s/%s may list and watch only its own Runs: add the field selector %s=%s,%s=%s",
		id.Pod.Namespace, id.Pod.Name, lifecycle.FieldStatusAssignedPod, id.Pod.Name, lifecycle.FieldStatusAssignedPodUID, id.Pod.UID)
}

// authorizeGet allows reading a Run assigned to this Pod (and handing over
// its log). Absent and foreign
// Runs get the same answer, so a 403 tells nothing about other Runs.
func (a *Authorizer) authorizeGet(ctx context.Context, id Identity, name string) (authorizer.Decision, string, error) {
	run, err := a.getRun(ctx, id.Namespace, name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return authorizer.DecisionDeny, "", fmt.Errorf("reading Run %s/%s to authorize runtimed of Pod %s: %w", id.Namespace, name, id.Pod.Name, err)
	case ownedBy(run, id):
		return authorizer.DecisionAllow, "", nil
	}
	return deny("runtimed of Pod %s/%s may read only Runs of Runtime %s assigned to its Pod", id.Pod.Namespace, id.Pod.Name, id.Runtime)
}

// ownedBy reports whether run is of id's Runtime and assigned to id's Pod
// (this incarnation of the name).
func ownedBy(run *kruntimes.Run, id Identity) bool {
	return run.Namespace == id.Namespace && run.Spec.Runtime == id.Runtime &&
		run.Status.AssignedPodUID == id.Pod.UID && run.Status.AssignedPod == id.Pod.Name
}

func deny(format string, args ...any) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, fmt.Sprintf(format, args...), nil
}

func subresourceSuffix(sub string) string {
	if sub == "" {
		return ""
	}
	return "/" + sub
}
