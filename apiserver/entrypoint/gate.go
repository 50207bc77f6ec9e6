package entrypoint

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// gateAllowedPaths are what a direct caller may still reach while the
// direct entry point is off: the probes and the metrics a Prometheus in the
// cluster scrapes from the Pod (its own authorization still applies).
var gateAllowedPaths = append([]string{"/metrics"}, probePaths...)

// gateReason tells a refused direct caller where to go instead.
const gateReason = "kruntimes-apiserver's direct entry point is off (--direct-entry-point=false): reach the kruntimes.io API through kube-apiserver"

// Gate refuses the requests Authenticator marked as direct while the direct
// entry point is off, except the probes and /metrics, and has no opinion on
// any other. It goes first among the server's authorizers, so no other one
// can allow what it refuses.
type Gate struct{}

var _ authorizer.Authorizer = Gate{}

// Authorize implements authorizer.Authorizer.
func (Gate) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	if u == nil || !slices.Contains(u.GetExtra()[UserExtraKey], Direct) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if !attrs.IsResourceRequest() && slices.ContainsFunc(gateAllowedPaths, func(p string) bool { return pathUnder(attrs.GetPath(), p) }) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	return authorizer.DecisionDeny, gateReason, nil
}

// ConditionsAwareAuthorize implements authorizer.Authorizer: Gate has no
// conditions.
func (g Gate) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(g.Authorize(ctx, attrs))
}

// EvaluateConditions implements authorizer.Authorizer: Gate never returns
// a conditional decision, so it fails closed on one.
func (Gate) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}
