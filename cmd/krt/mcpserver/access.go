package mcpserver

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// accessTTL bounds how long an answer of a SelfSubjectAccessReview is
// reused.
const accessTTL = 30 * time.Second

// accessReviewer says whether the caller may create runs/invoke on the Run
// name in namespace.
type accessReviewer func(ctx context.Context, namespace, name string) (bool, error)

func ssarReviewer(kube kubernetes.Interface) accessReviewer {
	return func(ctx context.Context, namespace, name string) (bool, error) {
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace:   namespace,
				Verb:        "create",
				Group:       v1alpha1.SchemeGroupVersion.Group,
				Resource:    "runs",
				Subresource: "invoke",
				Name:        name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return review.Status.Allowed, nil
	}
}

type accessAnswer struct {
	allowed bool
	at      time.Time
}

// rulesReviewer answers which resource rules the caller has in namespace
// (a SelfSubjectRulesReview), and whether they are complete: every
// authorizer of the cluster could list what it allows.
type rulesReviewer func(ctx context.Context, namespace string) (rules []authorizationv1.ResourceRule, complete bool, err error)

func ssrrReviewer(kube kubernetes.Interface) rulesReviewer {
	return func(ctx context.Context, namespace string) ([]authorizationv1.ResourceRule, bool, error) {
		review, err := kube.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
			Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, false, err
		}
		st := review.Status
		return st.ResourceRules, !st.Incomplete && st.EvaluationError == "", nil
	}
}

// mayInvoke says whether rules allow create runs/invoke on the Run name,
// matching as RBAC does: "*" for any verb, group or resource, "*/invoke"
// for the subresource of any resource, no resourceNames for every name.
func mayInvoke(rules []authorizationv1.ResourceRule, name string) bool {
	has := func(set []string, values ...string) bool {
		for _, v := range set {
			for _, want := range values {
				if v == want {
					return true
				}
			}
		}
		return false
	}
	for _, r := range rules {
		if has(r.Verbs, "*", "create") && has(r.APIGroups, "*", v1alpha1.SchemeGroupVersion.Group) &&
			has(r.Resources, "*", "runs/invoke", "*/invoke") && (len(r.ResourceNames) == 0 || has(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// reviewsPerRound is how many SelfSubjectAccessReviews are in flight at
// once; more Runs to ask about than that are answered from one
// SelfSubjectRulesReview when the cluster's rules are complete.
const reviewsPerRound = 8

// accessCache keeps each Run's answer for accessTTL.
type accessCache struct {
	review accessReviewer
	// rules, when set, answers for many Runs at once.
	rules rulesReviewer
	now   func() time.Time

	mu      sync.Mutex
	answers map[types.UID]accessAnswer
}

// allowedAll answers for each of runs (of any namespaces), asking at most
// 8 reviews at once (or one rules review per namespace with more to ask).
// A review that fails counts as not allowed and is not cached.
func (c *accessCache) allowedAll(ctx context.Context, runs []*v1alpha1.Run) []bool {
	out := make([]bool, len(runs))
	now := c.now()
	c.mu.Lock()
	if c.answers == nil {
		c.answers = map[types.UID]accessAnswer{}
	}
	askIn := map[string][]int{} // by namespace
	keep := map[types.UID]bool{}
	for i, run := range runs {
		keep[run.UID] = true
		if a, ok := c.answers[run.UID]; ok && now.Sub(a.at) < accessTTL {
			out[i] = a.allowed
			continue
		}
		askIn[run.Namespace] = append(askIn[run.Namespace], i)
	}
	for uid := range c.answers {
		if !keep[uid] {
			delete(c.answers, uid)
		}
	}
	c.mu.Unlock()

	// Many Runs of a namespace to ask about (a new session, or every
	// 30 s): one SelfSubjectRulesReview instead of a review per Run, when
	// the cluster's authorizers can list all they allow (RBAC can; a
	// webhook cannot, and then each Run is asked about).
	var ask []int
	for namespace, indexes := range askIn {
		if len(indexes) <= reviewsPerRound || c.rules == nil {
			ask = append(ask, indexes...)
			continue
		}
		rules, complete, err := c.rules(ctx, namespace)
		if err != nil {
			fmt.Fprintf(os.Stderr, "krt mcp: SelfSubjectRulesReview of namespace %s: %v\n", namespace, err)
		}
		if err != nil || !complete {
			ask = append(ask, indexes...)
			continue
		}
		c.mu.Lock()
		for _, i := range indexes {
			out[i] = mayInvoke(rules, runs[i].Name)
			c.answers[runs[i].UID] = accessAnswer{allowed: out[i], at: now}
		}
		c.mu.Unlock()
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, reviewsPerRound)
	for _, i := range ask {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			run := runs[i]
			allowed, err := c.review(ctx, run.Namespace, run.Name)
			if err != nil {
				fmt.Fprintf(os.Stderr, "krt mcp: SelfSubjectAccessReview of runs/invoke %s/%s: %v\n", run.Namespace, run.Name, err)
				return
			}
			out[i] = allowed
			c.mu.Lock()
			c.answers[run.UID] = accessAnswer{allowed: allowed, at: now}
			c.mu.Unlock()
		}(i)
	}
	wg.Wait()
	return out
}
