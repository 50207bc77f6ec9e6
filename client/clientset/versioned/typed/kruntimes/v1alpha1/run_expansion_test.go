package v1alpha1_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// status writes a metav1.Status as kruntimes-apiserver and kube-apiserver
// write them.
func status(code int, reason string, retryAfter bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		details := `{}`
		if retryAfter {
			w.Header().Set("Retry-After", "1")
			details = `{"retryAfterSeconds":1}`
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"m","reason":"` + reason + `","details":` + details + `,"code":` + strconv.Itoa(code) + `}`))
	}
}

// TestClassifyInvokeError sends Invoke through client-go to a loopback
// server answering as each party on the way would, and checks what the
// error says about the handler.
func TestClassifyInvokeError(t *testing.T) {
	cases := []struct {
		name   string
		answer http.HandlerFunc
		want   typedv1alpha1.InvokeOutcome
	}{
		{"429 from kruntimes: it did not run", status(http.StatusTooManyRequests, "TooManyRequests", true), typedv1alpha1.InvokeNotRun},
		{"kruntimes' 503 with retryAfterSeconds: it did not run", status(http.StatusServiceUnavailable, "ServiceUnavailable", true), typedv1alpha1.InvokeNotRun},
		{"a 503 Status without retryAfterSeconds may have run", status(http.StatusServiceUnavailable, "ServiceUnavailable", false), typedv1alpha1.InvokeOutcomeUnknown},
		{"the aggregation proxy's plain-text 503 may have run", func(w http.ResponseWriter, _ *http.Request) {
			// What kube-aggregator's proxy writes when kruntimes-apiserver
			// is down or its connection broke (http.Error).
			http.Error(w, "service unavailable", http.StatusServiceUnavailable)
		}, typedv1alpha1.InvokeOutcomeUnknown},
		{"a plain-text 503 with Retry-After still may have run", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "service unavailable", http.StatusServiceUnavailable)
		}, typedv1alpha1.InvokeOutcomeUnknown},
		{"502: dispatched, outcome unknown", status(http.StatusBadGateway, "InternalError", false), typedv1alpha1.InvokeOutcomeUnknown},
		{"500 may have run", status(http.StatusInternalServerError, "InternalError", false), typedv1alpha1.InvokeOutcomeUnknown},
		{"504 timed out", status(http.StatusGatewayTimeout, "Timeout", false), typedv1alpha1.InvokeTimedOut},
		{"501 invoke disabled is refused", status(http.StatusNotImplemented, "NotImplemented", false), typedv1alpha1.InvokeRefused},
		{"404 is refused", status(http.StatusNotFound, "NotFound", false), typedv1alpha1.InvokeRefused},
		{"409 is refused", status(http.StatusConflict, "Conflict", false), typedv1alpha1.InvokeRefused},
		{"413 is refused", status(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", false), typedv1alpha1.InvokeRefused},
		{"a connection closed after the request was sent may have run", func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}, typedv1alpha1.InvokeOutcomeUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				tc.answer(w, r)
			}))
			t.Cleanup(srv.Close)
			_, err := runs(t, srv.URL).Invoke(t.Context(), "fn", []byte(`{}`), typedv1alpha1.InvokeOptions{})
			require.Error(t, err)
			assert.Equal(t, tc.want, typedv1alpha1.ClassifyInvokeError(err), "%v", err)
			assert.Equal(t, int32(1), requests.Load(), "sent once, never re-sent")
		})
	}

	t.Run("a server that cannot be reached was not sent anything", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		_, err = runs(t, "http://"+addr).Invoke(t.Context(), "fn", []byte(`{}`), typedv1alpha1.InvokeOptions{})
		require.Error(t, err)
		assert.Equal(t, typedv1alpha1.InvokeRefused, typedv1alpha1.ClassifyInvokeError(err), "%v", err)
	})
}

func runs(t *testing.T, url string) typedv1alpha1.RunInterface {
	t.Helper()
	client, err := versioned.NewForConfig(&rest.Config{Host: url})
	require.NoError(t, err)
	return client.KruntimesV1alpha1().Runs("ns")
}
