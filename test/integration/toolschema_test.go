package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/clientset/versioned"
)

// weatherInput is a tool's input schema, pretty-printed as a person writes it.
const weatherInput = `{
  "type": "object",
  "properties": {
    "city": {"type": "string", "minLength": 1},
    "days": {"type": "integer", "minimum": 1, "maximum": 16}
  },
  "required": ["city"]
}`

func typedFunctionRun(name string) *v1alpha1.Run {
	run := functionRun(name)
	run.Spec.Mode.Function.Description = "Forecast for a city, by day."
	run.Spec.Mode.Function.Schema = &v1alpha1.FunctionSchema{
		Input:  &runtime.RawExtension{Raw: []byte(weatherInput)},
		Output: &runtime.RawExtension{Raw: []byte(`{"type":"object","properties":{"forecast":{"type":"array","items":{"type":"number"}}}}`)},
	}
	return run
}

// TestFunctionSchemaThroughTheAPI: a function's description and schemas
// survive a protobuf create and read back the same through JSON and
// protobuf; an invalid schema is a 422 naming the path inside it; the
// schema is immutable, and re-sending it unchanged is not a change.
func TestFunctionSchemaThroughTheAPI(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *testServer) {
		ctx := context.Background()
		pb, err := versioned.NewForConfig(preferProtobuf(s.config))
		require.NoError(t, err)
		pbRuns := pb.KruntimesV1alpha1().Runs(namespace)
		jsonRuns := s.client.KruntimesV1alpha1().Runs(namespace)

		created, err := pbRuns.Create(ctx, typedFunctionRun("typed"), metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, "Forecast for a city, by day.", created.Spec.Mode.Function.Description)
		require.NotNil(t, created.Spec.Mode.Function.Schema)
		assert.JSONEq(t, weatherInput, string(created.Spec.Mode.Function.Schema.Input.Raw))
		assert.NotContains(t, string(created.Spec.Mode.Function.Schema.Input.Raw), "\n", "stored compact")

		viaJSON, err := jsonRuns.Get(ctx, "typed", metav1.GetOptions{})
		require.NoError(t, err)
		viaPB, err := pbRuns.Get(ctx, "typed", metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, apiequality.Semantic.DeepEqual(created, viaJSON), "the JSON client sees another Run")
		assert.True(t, apiequality.Semantic.DeepEqual(created, viaPB), "the protobuf client sees another Run")

		// Re-sent unchanged, pretty-printed again: not a change.
		resent := viaPB.DeepCopy()
		resent.Labels = map[string]string{"kruntimes.io/tool": "true"}
		resent.Spec.Mode.Function.Schema.Input.Raw = []byte(weatherInput)
		_, err = pbRuns.Update(ctx, resent, metav1.UpdateOptions{})
		require.NoError(t, err, "an unchanged schema is not an immutability error")

		stored, err := jsonRuns.Get(ctx, "typed", metav1.GetOptions{})
		require.NoError(t, err)
		changed := stored.DeepCopy()
		changed.Spec.Mode.Function.Schema.Input.Raw = []byte(`{"type":"object"}`)
		_, err = jsonRuns.Update(ctx, changed, metav1.UpdateOptions{})
		assertInvalidField(t, err, "spec.mode")
		after, err := jsonRuns.Get(ctx, "typed", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, stored, after, "a rejected change leaves the Run as it was")

		for _, tc := range []struct {
			name  string
			set   func(*v1alpha1.FunctionMode)
			field string
		}{
			{"an unknown type inside the input schema", func(f *v1alpha1.FunctionMode) {
				f.Schema.Input.Raw = []byte(`{"type":"object","properties":{"city":{"type":"text"}}}`)
			}, "spec.mode.function.schema.input.properties[city].type"},
			{"a $ref inside the output schema", func(f *v1alpha1.FunctionMode) {
				f.Schema.Output.Raw = []byte(`{"type":"object","properties":{"x":{"$ref":"#/definitions/x"}}}`)
			}, "spec.mode.function.schema.output.properties[x].$ref"},
			{"an input schema over 64 KiB", func(f *v1alpha1.FunctionMode) {
				f.Schema.Input.Raw = []byte(`{"type":"object","description":"` + strings.Repeat("x", 64<<10) + `"}`)
			}, "spec.mode.function.schema.input"},
			{"a description over 1 KiB", func(f *v1alpha1.FunctionMode) {
				f.Description = strings.Repeat("d", 1025)
			}, "spec.mode.function.description"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				run := typedFunctionRun("invalid-schema")
				tc.set(run.Spec.Mode.Function)
				_, err := jsonRuns.Create(ctx, run, metav1.CreateOptions{})
				assertInvalidField(t, err, tc.field)
			})
		}
	})
}

// TestFunctionSchemaIsExplained: kubectl explain finds the new fields in
// the published OpenAPI v3 with their descriptions.
func TestFunctionSchemaIsExplained(t *testing.T) {
	s := startServer(t, "")
	code, body := s.raw(t, http.MethodGet, "/openapi/v3/apis/kruntimes.io/v1alpha1", "", nil, nil)
	require.Equal(t, http.StatusOK, code)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(body, &doc))
	fn := doc.Components.Schemas["io.kruntimes.v1alpha1.FunctionMode"]
	assert.Contains(t, fn.Properties["description"].Description, "1 KiB")
	assert.Contains(t, fn.Properties["schema"].Description, "takes and returns")
	schema := doc.Components.Schemas["io.kruntimes.v1alpha1.FunctionSchema"]
	assert.Contains(t, schema.Properties["input"].Description, "400")
	assert.Contains(t, schema.Properties["output"].Description, "does not validate")
}

// TestInvokeValidatesInputAgainstSchema: through the real server and a
// real gRPC runtimed, a body that breaks the Run's schema.input is a 400
// listing every violation and never reaches runtimed; a valid body is
// invoked; a Run without a schema takes the same invalid body.
func TestInvokeValidatesInputAgainstSchema(t *testing.T) {
	s := startInvokeServer(t)
	s.runtimed.release()
	s.createReady(t, typedFunctionRun("typed"))
	client := httpClient(t, s.config, false, true)
	url := func(name string) string {
		return s.config.Host + "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/" + name + "/invoke"
	}
	executions := func() int { return len(s.runtimed.started) }
	invalid := []byte(`{"days":40}`)

	// Until the routing cache sees the new Run, it answers 503; an
	// invalid body is safe to poll with: it never runs.
	var a answer
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		a = do(client, http.MethodPost, url("typed"), invalid)
		return a.code != http.StatusServiceUnavailable && a.code != http.StatusNotFound, nil
	}), "last answer: %v", a)
	require.Equal(t, http.StatusBadRequest, a.code, "%v", a)
	var st metav1.Status
	require.NoError(t, json.Unmarshal([]byte(a.body), &st))
	assert.Equal(t, metav1.StatusReasonBadRequest, st.Reason)
	require.NotNil(t, st.Details)
	fields := map[string]bool{}
	for _, c := range st.Details.Causes {
		fields[c.Field] = true
	}
	assert.Equal(t, map[string]bool{"input.city": true, "input.days": true}, fields, "every violation is listed: %s", a.body)
	assert.Empty(t, a.header.Get("Retry-After"))
	assert.Zero(t, executions(), "the handler never ran on input that breaks its schema")

	a = do(client, http.MethodPost, url("typed"), []byte(`{"city":"Oslo","days":3}`))
	require.Equal(t, http.StatusOK, a.code, "%v", a)
	assert.Equal(t, 1, executions(), "valid input is invoked once")

	a = do(client, http.MethodPost, url("fn"), invalid)
	require.Equal(t, http.StatusOK, a.code, "a Run without a schema is unaffected: %v", a)
	assert.Equal(t, 2, executions())
}
