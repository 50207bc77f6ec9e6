package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// apiWrite is one write a client sent, and how the server answered it.
type apiWrite struct {
	// Verb is create, update, patch or delete.
	Verb string
	// Resource is the plural resource, with /subresource when there is one.
	Resource string
	// Name is the object's, from the path or, for a create, the body.
	Name string
	// Code is the HTTP status the server answered; 0 when none came.
	Code int
	// Body is the request body (JSON).
	Body []byte
}

func (w apiWrite) String() string { return w.Verb + " " + w.Resource + " " + w.Name }

// Applied reports whether the server accepted the write.
func (w apiWrite) Applied() bool { return w.Code >= 200 && w.Code < 300 }

// apiWrites records every write made through the configs it wraps, as it
// goes over the wire to a real server: the counting the fake clientsets'
// action lists used to do.
type apiWrites struct {
	mu     sync.Mutex
	writes []apiWrite
	// before, when set, runs before each write is sent, on the writer's
	// goroutine; tests use it to race the writer or hold it back.
	before func(apiWrite)
	// refuse, when set and true for a write, answers it 403 Forbidden
	// without sending it, as a server whose authorizer denies it would.
	refuse func(apiWrite) bool
}

// config returns a copy of base whose writes are recorded. It speaks JSON
// so that bodies can be read back.
func (a *apiWrites) config(base *rest.Config) *rest.Config {
	c := rest.CopyConfig(base)
	c.ContentType = "application/json"
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			verb, ok := map[string]string{
				http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete",
			}[req.Method]
			if !ok {
				return rt.RoundTrip(req)
			}
			w := apiWrite{Verb: verb}
			if req.Body != nil {
				body, err := io.ReadAll(req.Body)
				req.Body.Close()
				if err != nil {
					return nil, err
				}
				w.Body = body
				req.Body = io.NopCloser(bytes.NewReader(body))
			}
			w.Resource, w.Name = resourceAndName(req.URL.Path)
			if w.Name == "" && len(w.Body) > 0 {
				var obj struct {
					Metadata struct{ Name string } `json:"metadata"`
				}
				_ = json.Unmarshal(w.Body, &obj)
				w.Name = obj.Metadata.Name
			}
			if a.before != nil {
				a.before(w)
			}
			var resp *http.Response
			var err error
			if a.refuse != nil && a.refuse(w) {
				resp = forbidden(req, w)
			} else {
				resp, err = rt.RoundTrip(req)
			}
			if resp != nil {
				w.Code = resp.StatusCode
			}
			a.mu.Lock()
			a.writes = append(a.writes, w)
			a.mu.Unlock()
			return resp, err
		})
	})
	return c
}

// resourceAndName splits .../namespaces/<ns>/<resource>[/<name>[/<sub>]]
// (or the cluster-scoped form) into resource[/sub] and name.
func resourceAndName(path string) (string, string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// /api/<version>/... or /apis/<group>/<version>/...
	skip := 2
	if len(parts) > 0 && parts[0] == "apis" {
		skip = 3
	}
	if len(parts) < skip {
		return path, ""
	}
	parts = parts[skip:]
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	switch len(parts) {
	case 1:
		return parts[0], ""
	case 2:
		return parts[0], parts[1]
	default:
		return parts[0] + "/" + parts[2], parts[1]
	}
}

// All returns every write so far.
func (a *apiWrites) All() []apiWrite {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]apiWrite(nil), a.writes...)
}

// Len is how many writes were made so far; a mark for Since.
func (a *apiWrites) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.writes)
}

// Since returns the writes after mark that match keep.
func (a *apiWrites) Since(mark int, keep func(apiWrite) bool) []apiWrite {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []apiWrite
	for _, w := range a.writes[mark:] {
		if keep == nil || keep(w) {
			out = append(out, w)
		}
	}
	return out
}

// named keeps the writes of one object.
func named(resource, name string) func(apiWrite) bool {
	return func(w apiWrite) bool { return w.Resource == resource && w.Name == name }
}

// describe renders writes as "verb resource name (code)" lines, for
// comparisons and failure messages.
func describe(writes []apiWrite) []string {
	out := make([]string, 0, len(writes))
	for _, w := range writes {
		out = append(out, fmt.Sprintf("%s (%d)", w, w.Code))
	}
	return out
}

// decode unmarshals the body of w into obj.
func decode[T any](t *testing.T, w apiWrite) *T {
	t.Helper()
	obj := new(T)
	require.NoError(t, json.Unmarshal(w.Body, obj), "body of %s", w)
	return obj
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// forbidden is the answer of a server that denies w.
func forbidden(req *http.Request, w apiWrite) *http.Response {
	status := apierrors.NewForbidden(schema.GroupResource{Resource: w.Resource}, w.Name, fmt.Errorf("refused by the test")).ErrStatus
	status.Kind, status.APIVersion = "Status", "v1"
	body, _ := json.Marshal(status)
	return &http.Response{
		StatusCode: http.StatusForbidden,
		Header:     http.Header{"Content-Type": []string{"application/json"}},
		Body:       io.NopCloser(bytes.NewReader(body)),
		Request:    req,
	}
}
