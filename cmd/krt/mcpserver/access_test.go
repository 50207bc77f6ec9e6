package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

func TestAccessCache(t *testing.T) {
	now := time.Unix(1000, 0)
	var asked atomic.Int32
	fail := false
	c := &accessCache{
		now: func() time.Time { return now },
		review: func(_ context.Context, ns, name string) (bool, error) {
			asked.Add(1)
			if fail {
				return false, errors.New("down")
			}
			return name == "yes", nil
		},
	}
	run := func(name string) *v1alpha1.Run {
		return &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	}
	runs := []*v1alpha1.Run{run("yes"), run("no")}
	assert.Equal(t, []bool{true, false}, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 2, asked.Load())
	now = now.Add(29 * time.Second)
	assert.Equal(t, []bool{true, false}, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 2, asked.Load(), "answers are reused within 30 s")
	now = now.Add(time.Second)
	fail = true
	assert.Equal(t, []bool{false, false}, c.allowedAll(context.Background(), runs), "a failed review is not allowed")
	assert.EqualValues(t, 4, asked.Load(), "answers 30 s old are asked again")
	fail = false
	assert.Equal(t, []bool{true, false}, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 6, asked.Load(), "a failed review is not cached")
}

func TestMayInvoke(t *testing.T) {
	rule := func(verbs, groups, resources, names []string) authorizationv1.ResourceRule {
		return authorizationv1.ResourceRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
	}
	one := []string{"create"}
	group := []string{"kruntimes.io"}
	for _, c := range []struct {
		name  string
		rules []authorizationv1.ResourceRule
		want  bool
	}{
		{"the invoker role", []authorizationv1.ResourceRule{rule(one, group, []string{"runs/invoke"}, nil)}, true},
		{"named", []authorizationv1.ResourceRule{rule(one, group, []string{"runs/invoke"}, []string{"other", "forecast"})}, true},
		{"another name", []authorizationv1.ResourceRule{rule(one, group, []string{"runs/invoke"}, []string{"other"})}, false},
		{"everything (system:masters)", []authorizationv1.ResourceRule{rule([]string{"*"}, []string{"*"}, []string{"*"}, nil)}, true},
		{"*/invoke", []authorizationv1.ResourceRule{rule(one, group, []string{"*/invoke"}, nil)}, true},
		{"runs/* is not RBAC", []authorizationv1.ResourceRule{rule(one, group, []string{"runs/*"}, nil)}, false},
		{"reading only (kruntimes-view)", []authorizationv1.ResourceRule{rule([]string{"get", "list", "watch"}, group, []string{"runs", "runs/status"}, nil)}, false},
		{"runs, not the subresource", []authorizationv1.ResourceRule{rule([]string{"*"}, group, []string{"runs"}, nil)}, false},
		{"another group", []authorizationv1.ResourceRule{rule(one, []string{"example.com"}, []string{"runs/invoke"}, nil)}, false},
		{"none", nil, false},
	} {
		assert.Equal(t, c.want, mayInvoke(c.rules, "forecast"), c.name)
	}
}

// TestAccessCacheRulesReview: more Runs than one round of reviews are
// answered from one SelfSubjectRulesReview when it is complete, and asked
// one by one when it is not.
func TestAccessCacheRulesReview(t *testing.T) {
	var reviews, rulesReviews atomic.Int32
	complete := true
	c := &accessCache{
		now: time.Now,
		review: func(_ context.Context, ns, name string) (bool, error) {
			reviews.Add(1)
			return name == "run-3", nil
		},
		rules: func(_ context.Context, ns string) ([]authorizationv1.ResourceRule, bool, error) {
			rulesReviews.Add(1)
			return []authorizationv1.ResourceRule{{Verbs: []string{"create"}, APIGroups: []string{"kruntimes.io"}, Resources: []string{"runs/invoke"}, ResourceNames: []string{"run-3"}}}, complete, nil
		},
	}
	var runs []*v1alpha1.Run
	for i := range 20 {
		name := fmt.Sprintf("run-%d", i)
		runs = append(runs, &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}})
	}
	want := make([]bool, 20)
	want[3] = true
	assert.Equal(t, want, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 1, rulesReviews.Load())
	assert.EqualValues(t, 0, reviews.Load())
	assert.Equal(t, want, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 1, rulesReviews.Load(), "cached")

	c2 := &accessCache{now: time.Now, review: c.review, rules: c.rules}
	complete = false
	assert.Equal(t, want, c2.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 2, rulesReviews.Load())
	assert.EqualValues(t, 20, reviews.Load(), "incomplete rules: a review per Run")

	c3 := &accessCache{now: time.Now, review: c.review, rules: c.rules}
	complete = true
	assert.Equal(t, want[:8], c3.allowedAll(context.Background(), runs[:8]))
	assert.EqualValues(t, 2, rulesReviews.Load(), "one round of reviews is asked directly")
	assert.EqualValues(t, 28, reviews.Load())
}

// TestAccessCacheNamespaces: Runs of several namespaces are reviewed each in
// its own namespace, with one rules review per namespace that has many.
func TestAccessCacheNamespaces(t *testing.T) {
	var asked []string
	c := &accessCache{
		now: time.Now,
		review: func(_ context.Context, ns, name string) (bool, error) {
			return ns == "small" && name == "run-1", nil
		},
		rules: func(_ context.Context, ns string) ([]authorizationv1.ResourceRule, bool, error) {
			asked = append(asked, ns)
			return []authorizationv1.ResourceRule{{Verbs: []string{"create"}, APIGroups: []string{"kruntimes.io"}, Resources: []string{"runs/invoke"}, ResourceNames: []string{"run-3"}}}, true, nil
		},
	}
	var runs []*v1alpha1.Run
	var want []bool
	for _, ns := range []string{"big", "small"} {
		n := 20
		if ns == "small" {
			n = 2
		}
		for i := range n {
			name := fmt.Sprintf("run-%d", i)
			runs = append(runs, &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}})
			want = append(want, ns == "big" && i == 3 || ns == "small" && i == 1)
		}
	}
	assert.Equal(t, want, c.allowedAll(context.Background(), runs))
	assert.Equal(t, []string{"big"}, asked, "a rules review for the namespace with more than 8 Runs only")
}
