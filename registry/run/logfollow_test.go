package run

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// TestLongRunning: a follow of runs/log is exempt from the request timeout;
// a plain read of it, other subresources and other resources are not.
func TestLongRunning(t *testing.T) {
	check := LongRunning(func(_ *http.Request, info *genericapirequest.RequestInfo) bool { return info.Verb == "watch" })
	for _, tc := range []struct {
		url         string
		resource    string
		subresource string
		verb        string
		want        bool
	}{
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/log?follow=true", "runs", "log", "get", true},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/log?follow=1", "runs", "log", "get", true},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/log", "runs", "log", "get", false},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/log?follow=false", "runs", "log", "get", false},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/invoke?follow=true", "runs", "invoke", "create", false},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runtimes/a/log?follow=true", "runtimes", "log", "get", false},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs?watch=true", "runs", "", "watch", true},
	} {
		r := httptest.NewRequest("GET", tc.url, nil)
		info := &genericapirequest.RequestInfo{IsResourceRequest: true, Resource: tc.resource, Subresource: tc.subresource, Verb: tc.verb}
		assert.Equal(t, tc.want, check(r, info), tc.url)
	}
}
