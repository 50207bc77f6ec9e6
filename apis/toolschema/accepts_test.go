package toolschema

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

// TestAcceptorPassesValidInputs: the valid inputs of violationCases pass
// without kube-openapi, except where a keyword is left to it, and no
// invalid one does.
func TestAcceptorPassesValidInputs(t *testing.T) {
	leftToKubeOpenAPI := map[string]bool{"oneOf with one branch": true, "not, valid": true}
	for _, tc := range violationCases {
		t.Run(tc.name, func(t *testing.T) {
			var value any
			if json.Unmarshal([]byte(tc.input), &value) != nil {
				return
			}
			a := newAcceptor(compileSpec(t, tc.schema), strfmt.Default)
			assert.Equal(t, tc.want == nil && !leftToKubeOpenAPI[tc.name], a.accepts(value, strfmt.Default))
		})
	}
}

// FuzzAcceptorNeverPassesWhatKubeOpenAPIRefuses: whatever the schema
// (one Validate passes) and the input, the acceptor passes the input only
// if kube-openapi finds no violation in it, so a 400 lists what it listed
// before.
func FuzzAcceptorNeverPassesWhatKubeOpenAPIRefuses(f *testing.F) {
	for _, tc := range violationCases {
		f.Add([]byte(tc.schema), []byte(tc.input))
	}
	f.Fuzz(func(t *testing.T, schema, input []byte) {
		var value any
		if len(Validate(schema, InputPath)) > 0 || json.Unmarshal(input, &value) != nil {
			return
		}
		sch := compileSpec(t, string(schema))
		if newAcceptor(sch, strfmt.Default).accepts(value, strfmt.Default) {
			result := validate.NewSchemaValidator(sch, nil, "", strfmt.Default).Validate(value)
			require.Empty(t, result.Errors, "passed %s against %s", input, schema)
		}
	})
}

func compileSpec(t testing.TB, schema string) *spec.Schema {
	s := &spec.Schema{}
	require.NoError(t, json.Unmarshal([]byte(schema), s))
	return s
}
