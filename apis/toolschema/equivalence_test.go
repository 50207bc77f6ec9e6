package toolschema

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// violationCases are inputs and the violations Validate reports for them,
// each as field.Error's text (path, kind, value and detail) and sorted,
// since kube-openapi reports an object's properties in map order. They
// were recorded from kube-openapi's validator alone, before anything
// answered for it (and the valid inputs since added are checked against
// it by FuzzAcceptorNeverPassesWhatKubeOpenAPIRefuses's seeds): a change
// to how inputs are validated must leave every line as it is.
var violationCases = []struct {
	name, schema, input string
	want                []string
}{
	{"valid input", weather, `{"city":"Oslo","days":3,"unit":"C"}`, nil},
	{"an integral number is an integer", weather, `{"city":"Oslo","days":3.0}`, nil},
	{"required, type, enum and unknown property", weather, `{"days":"3","unit":"K","extra":1}`, []string{
		`input.city: Required value`,
		`input.days: Invalid value: "string": days in body must be of type integer: "string"`,
		`input.extra: Forbidden: is not a property the schema allows`,
		`input.unit: Unsupported value: "K": supported values: "C", "F"`,
	}},
	{"a fraction is not an integer", weather, `{"city":"Oslo","days":2.5}`, []string{
		`input.days: Invalid value: "number": days in body must be of type integer: "number"`,
		`input: Invalid value: "": Checked value must be of type integer (default format) in days`,
	}},
	{"bounds of strings and numbers", weather, `{"city":"","days":17}`, []string{
		`input.city: Invalid value: "": city in body should be at least 1 chars long`,
		`input.days: Invalid value: 17: days in body should be less than or equal to 16`,
	}},
	{"null where the type is not nullable", weather, `{"city":null}`, []string{
		`input.city: Invalid value: "null": city in body must be of type string: "null"`,
	}},
	{"the document is not an object", weather, `[]`, []string{
		`input: Invalid value: "array":  in body must be of type object: "array"`,
	}},
	{"the document is not JSON", weather, `{"city":`, []string{
		`input: Invalid value: "": is not JSON: unexpected end of JSON input`,
	}},
	{"nullable takes null", kinds, `{"note":null}`, nil},
	{"an enum never takes null", kinds, `{"level":null}`, []string{
		`input.level: Invalid value: "null": level in body must be of type integer: "null"`,
		`input.level: Unsupported value: null: supported values: "1", "2", "null"`,
	}},
	{"every kind valid", kinds, `{"note":"n","level":2,"ratio":0.5,"when":"2026-12-03","id":"7d444840-9dc0-11d1-b245-5ffdce74fad2","tags":["a","bc"],"meta":{"k":"v"},"code":"AB-12","either":"x","both":4,"even":6,"small":{"a":1}}`, nil},
	{"the other branch of anyOf", kinds, `{"either":3}`, nil},
	{"formats", kinds, `{"when":"2026-13-45","id":"nope"}`, []string{
		`input.id: Invalid value: "nope": id in body must be of type uuid: "nope"`,
		`input.when: Invalid value: "2026-13-45": when in body must be of type date: "2026-13-45"`,
	}},
	{"a pattern", kinds, `{"code":"ab-12"}`, []string{
		`input.code: Invalid value: "ab-12": code in body should match '^[A-Z]+-[0-9]+$'`,
	}},
	{"items and their paths", kinds, `{"tags":["a","toolong",3,"d"]}`, []string{
		`input.tags: Invalid value: 4: tags in body should have at most 3 items`,
		`input.tags[1]: Invalid value: "toolong": tags[1] in body should be at most 2 chars long`,
		`input.tags[2]: Invalid value: "number": tags[2] in body must be of type string: "number"`,
	}},
	{"too few items", kinds, `{"tags":[]}`, []string{
		`input.tags: Invalid value: 0: tags in body should have at least 1 items`,
	}},
	{"additionalProperties with a schema, and property counts", kinds, `{"meta":{"a":"x","b":2,"c":"z"}}`, []string{
		`input.meta.b: Invalid value: "number": meta.b in body must be of type string: "number"`,
		`input.meta: Invalid value: 3: meta in body should have at most 2 properties`,
	}},
	{"too few properties", kinds, `{"meta":{}}`, []string{
		`input.meta: Invalid value: 0: meta in body should have at least 1 properties`,
	}},
	{"exclusive bounds and multipleOf", kinds, `{"ratio":1,"even":7,"level":3}`, []string{
		`input.even: Invalid value: 7: even in body should be a multiple of 2`,
		`input.level: Unsupported value: 3: supported values: "1", "2", "null"`,
		`input.ratio: Invalid value: 1: ratio in body should be less than 1`,
	}},
	{"anyOf with no branch", kinds, `{"either":true}`, []string{
		`input.either: Invalid value: "boolean": either in body must be of type string: "boolean"`,
		`input: Invalid value: "": "either" must validate at least one schema (anyOf)`,
	}},
	{"allOf with a failing branch", kinds, `{"both":20}`, []string{
		`input.both: Invalid value: 20: both in body should be less than or equal to 10`,
		`input: Invalid value: "": "both" must validate all the schemas (allOf)`,
	}},
	{"oneOf with two branches", kinds, `{"one":5}`, []string{
		`input: Invalid value: "": "one" must validate one and only one schema (oneOf). Found 2 valid alternatives`,
	}},
	{"oneOf with one branch", kinds, `{"one":50}`, nil},
	{"not", kinds, `{"flag":false}`, []string{
		`input: Invalid value: "": "flag" must not validate the schema (not)`,
	}},
	{"not, valid", kinds, `{"flag":true}`, nil},
	{"nested required and types", kinds, `{"small":{"b":"x"}}`, []string{
		`input.small.a: Required value`,
		`input.small.b: Invalid value: "string": small.b in body must be of type boolean: "string"`,
	}},
	{"a number beyond int64 as an integer", kinds, `{"level":1e300}`, []string{
		`input.level: Invalid value: "number": level in body must be of type integer: "number"`,
		`input.level: Unsupported value: 1e+300: supported values: "1", "2", "null"`,
		`input: Invalid value: "": Checked value must be of type integer (default format) in level`,
	}},
	{"int32 format", kinds, `{"count":3000000000}`, []string{
		`input: Invalid value: "": Checked value must be of type integer with format int32 in count`,
	}},
	{"a bound that is not an integer fails every integer", odd, `{"n":1}`, []string{
		`input: Invalid value: "": Maximum boundary value must be of type integer (default format) in n`,
	}},
	{"a format on a boolean checks a string against the format", odd, `{"b":"x"}`, []string{
		`input.b: Invalid value: "x": b in body must be of type date: "x"`,
	}},
	{"a boolean with a format it does not know takes any string", odd, `{"ub":"x"}`, nil},
	{"a format without a type refuses a boolean", odd, `{"f":true}`, []string{
		`input.f: Invalid value: "": f in body must be of type date: ""`,
	}},
	{"an unknown format is not checked", odd, `{"u":"anything"}`, nil},
	{"anyOf at the root", rootAnyOf, `{"x":"abc"}`, []string{
		`input.x: Invalid value: "abc": x in body should be at most 2 chars long`,
		`input: Invalid value: "": "" must validate at least one schema (anyOf)`,
	}},
	{"anyOf at the root, valid", rootAnyOf, `{"x":"abcdef"}`, nil},
}

const (
	weather = `{"type":"object","properties":{"city":{"type":"string","minLength":1},"days":{"type":"integer","minimum":1,"maximum":16},"unit":{"type":"string","enum":["C","F"]}},"required":["city"],"additionalProperties":false}`
	kinds   = `{"type":"object","properties":{
		"note":{"type":"string","nullable":true},
		"level":{"type":"integer","enum":[1,2,null]},
		"count":{"type":"integer","format":"int32"},
		"ratio":{"type":"number","minimum":0,"maximum":1,"exclusiveMaximum":true},
		"when":{"type":"string","format":"date"},
		"id":{"type":"string","format":"uuid"},
		"tags":{"type":"array","items":{"type":"string","maxLength":2},"minItems":1,"maxItems":3},
		"meta":{"type":"object","additionalProperties":{"type":"string"},"minProperties":1,"maxProperties":2},
		"code":{"type":"string","pattern":"^[A-Z]+-[0-9]+$"},
		"either":{"anyOf":[{"type":"string"},{"type":"integer"}]},
		"both":{"allOf":[{"type":"integer"},{"maximum":10}]},
		"one":{"oneOf":[{"type":"integer"},{"maximum":10}]},
		"even":{"type":"integer","multipleOf":2},
		"flag":{"type":"boolean","not":{"enum":[false]}},
		"small":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"}},"required":["a"]}
	}}`
	odd       = `{"type":"object","properties":{"n":{"type":"integer","maximum":1.5},"b":{"type":"boolean","format":"date"},"f":{"format":"date"},"u":{"type":"string","format":"no-such-format"},"ub":{"type":"boolean","format":"no-such-format"}}}`
	rootAnyOf = `{"type":"object","properties":{"x":{"type":"string"}},"anyOf":[{"properties":{"x":{"maxLength":2}}},{"properties":{"x":{"minLength":5}}}]}`
)

func TestValidatorViolationsAreUnchanged(t *testing.T) {
	for _, tc := range violationCases {
		t.Run(tc.name, func(t *testing.T) {
			require.Empty(t, Validate([]byte(tc.schema), InputPath), "the schema passes Validate")
			v, err := Compile([]byte(tc.schema))
			require.NoError(t, err)
			assert.Equal(t, tc.want, violations(v.Validate([]byte(tc.input))))
		})
	}
}

func violations[E interface{ Error() string }](errs []E) []string {
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	slices.Sort(got)
	return got
}
