package toolschema

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidate(t *testing.T) {
	root := field.NewPath("spec", "mode", "function", "schema", "input")
	cases := []struct {
		name   string
		schema string
		// errs are the paths and types of the expected errors, in order.
		errs []string
	}{
		{"an object with typed properties is accepted", `{"type":"object","properties":{"city":{"type":"string","minLength":1},"days":{"type":"integer","minimum":1,"maximum":16}},"required":["city"],"additionalProperties":false}`, nil},
		{"nested arrays, enums, anyOf and untyped nodes are accepted", `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}},"any":{"description":"anything"},"either":{"anyOf":[{"type":"string"},{"type":"integer"}]},"meta":{"type":"object","additionalProperties":{"type":"string"}}}}`, nil},
		{"a root that is not an object is refused", `{"type":"string"}`, []string{"spec.mode.function.schema.input.type: Invalid value"}},
		{"a root without a type is refused", `{"properties":{}}`, []string{"spec.mode.function.schema.input.type: Required value"}},
		{"a document that is not an object is refused", `[1]`, []string{"spec.mode.function.schema.input: Invalid value"}},
		{"an unknown type names its path inside the schema", `{"type":"object","properties":{"city":{"type":"text"}}}`, []string{"spec.mode.function.schema.input.properties[city].type: Unsupported value"}},
		{"a type list is refused", `{"type":"object","properties":{"x":{"type":["string","null"]}}}`, []string{"spec.mode.function.schema.input.properties[x].type: Invalid value"}},
		{"$ref is refused", `{"type":"object","properties":{"x":{"$ref":"#/definitions/y"}}}`, []string{"spec.mode.function.schema.input.properties[x].$ref: Forbidden"}},
		{"an unknown keyword is refused", `{"type":"object","x-kubernetes-preserve-unknown-fields":true}`, []string{"spec.mode.function.schema.input.x-kubernetes-preserve-unknown-fields: Forbidden"}},
		{"a pattern that does not compile is refused", `{"type":"object","properties":{"x":{"type":"string","pattern":"("}}}`, []string{"spec.mode.function.schema.input.properties[x].pattern: Invalid value"}},
		{"a negative count is refused", `{"type":"object","properties":{"x":{"type":"array","maxItems":-1}}}`, []string{"spec.mode.function.schema.input.properties[x].maxItems: Invalid value"}},
		{"uniqueItems true is refused", `{"type":"object","properties":{"x":{"type":"array","uniqueItems":true}}}`, []string{"spec.mode.function.schema.input.properties[x].uniqueItems: Forbidden"}},
		{"a required name twice is refused", `{"type":"object","required":["a","a"]}`, []string{"spec.mode.function.schema.input.required[1]: Duplicate value"}},
		{"an item of allOf that is not a schema is refused", `{"type":"object","allOf":[{"type":"object"},3]}`, []string{"spec.mode.function.schema.input.allOf[1]: Invalid value"}},
		{"an empty enum is refused", `{"type":"object","properties":{"x":{"enum":[]}}}`, []string{"spec.mode.function.schema.input.properties[x].enum: Invalid value"}},
		{"a schema that is not JSON is refused", `{"type":`, []string{"spec.mode.function.schema.input: Invalid value"}},
		{"an empty document is required", ``, []string{"spec.mode.function.schema.input: Required value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := Validate([]byte(tc.schema), root)
			var got []string
			for _, e := range errs {
				got = append(got, e.Field+": "+e.Type.String())
			}
			assert.Equal(t, tc.errs, got, "errors: %v", errs)
		})
	}
}

func TestValidateBounds(t *testing.T) {
	root := field.NewPath("schema")
	big := `{"type":"object","description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`
	errs := Validate([]byte(big), root)
	require.Len(t, errs, 1)
	assert.Equal(t, field.ErrorTypeTooLong, errs[0].Type)

	deep := `{"type":"object"` + strings.Repeat(`,"not":{"type":"object"`, MaxDepth+1) + strings.Repeat("}", MaxDepth+2)
	errs = Validate([]byte(deep), root)
	require.Len(t, errs, 1, "errors: %v", errs)
	assert.Equal(t, field.ErrorTypeForbidden, errs[0].Type)
}

func TestValidatorReportsEveryViolation(t *testing.T) {
	v, err := Compile([]byte(`{"type":"object","properties":{"city":{"type":"string","minLength":1},"days":{"type":"integer","minimum":1,"maximum":16},"unit":{"type":"string","enum":["C","F"]}},"required":["city"],"additionalProperties":false}`))
	require.NoError(t, err)

	assert.Empty(t, v.Validate([]byte(`{"city":"Oslo","days":3,"unit":"C"}`)), "valid input")
	assert.Empty(t, v.Validate([]byte(`{"city":"Oslo","days":3.0}`)), "an integral number is an integer")

	errs := v.Validate([]byte(`{"days":"3","unit":"K","extra":1}`))
	got := map[string]field.ErrorType{}
	for _, e := range errs {
		got[e.Field] = e.Type
	}
	assert.Equal(t, map[string]field.ErrorType{
		"input.city":  field.ErrorTypeRequired,
		"input.days":  field.ErrorTypeTypeInvalid,
		"input.unit":  field.ErrorTypeNotSupported,
		"input.extra": field.ErrorTypeForbidden,
	}, got, "errors: %v", errs)

	errs = v.Validate([]byte(`[]`))
	require.Len(t, errs, 1)
	assert.Equal(t, "input", errs[0].Field)
}

func TestValidatorBoundsViolations(t *testing.T) {
	v, err := Compile([]byte(`{"type":"object","additionalProperties":{"type":"integer"}}`))
	require.NoError(t, err)
	var b strings.Builder
	b.WriteString("{")
	for i := range 200 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":"x"`, i)
	}
	b.WriteString("}")
	errs := v.Validate([]byte(b.String()))
	require.Len(t, errs, MaxViolations+1)
	assert.Contains(t, errs[MaxViolations].Detail, "136 more")
}

func TestValidatorRootPropertiesKeepTheirSchemas(t *testing.T) {
	t.Run("a root with anyOf validates each branch with its own schema of a property", func(t *testing.T) {
		v, err := Compile([]byte(`{"type":"object","properties":{"x":{"type":"string"}},"anyOf":[{"properties":{"x":{"maxLength":2}}},{"properties":{"x":{"minLength":5}}}]}`))
		require.NoError(t, err)
		assert.Empty(t, v.Validate([]byte(`{"x":"ab"}`)))
		assert.Empty(t, v.Validate([]byte(`{"x":"abcdef"}`)))
		assert.NotEmpty(t, v.Validate([]byte(`{"x":"abc"}`)), "neither branch")
		assert.NotEmpty(t, v.Validate([]byte(`{"x":1}`)), "the root's own schema of x")
	})
	t.Run("keys beyond the properties go to additionalProperties, nested objects to their own schemas", func(t *testing.T) {
		v, err := Compile([]byte(`{"type":"object","properties":{"a":{"type":"object","properties":{"a":{"type":"integer"}}}},"additionalProperties":{"type":"boolean"}}`))
		require.NoError(t, err)
		assert.Empty(t, v.Validate([]byte(`{"a":{"a":1},"b":true}`)))
		errs := v.Validate([]byte(`{"a":{"a":"x"},"b":1}`))
		var fields []string
		for _, e := range errs {
			fields = append(fields, e.Field)
		}
		assert.ElementsMatch(t, []string{"input.a.a", "input.b"}, fields, "errors: %v", errs)
	})
}

// TestValidatorIsSafeForConcurrentUse: one compiled schema serves every
// invocation of its Run at once (run with -race).
func TestValidatorIsSafeForConcurrentUse(t *testing.T) {
	v, err := Compile([]byte(`{"type":"object","properties":{"city":{"type":"string","minLength":1},"days":{"type":"integer","maximum":16}},"required":["city"]}`))
	require.NoError(t, err)
	done := make(chan [2]int)
	for range 8 {
		go func() {
			var ok, bad int
			for i := range 200 {
				if i%2 == 0 {
					ok += len(v.Validate([]byte(`{"city":"Oslo","days":3}`)))
				} else {
					bad += len(v.Validate([]byte(`{"days":40}`)))
				}
			}
			done <- [2]int{ok, bad}
		}()
	}
	for range 8 {
		got := <-done
		assert.Equal(t, [2]int{0, 200}, got, "no violations for valid input, two for each invalid one")
	}
}
