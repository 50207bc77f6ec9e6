package toolschema

import (
	"reflect"
	"regexp"
	"slices"
	"unicode/utf8"

	"github.com/go-openapi/swag/conv"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

// acceptor answers the question almost every invocation asks — does this
// input break the schema at all? — without kube-openapi's validator, which
// builds a validator and a result for every keyword of every value (about
// 20 allocations a property). It says yes only where kube-openapi finds no
// violation, deciding each keyword as kube-openapi's SchemaValidator does
// (its quirks included: a null never matches an enum, a bound that is not
// an integer fails every value of an integer); an input it does not accept
// goes to kube-openapi, which lists the violations exactly as before. So
// what a caller sees cannot change, only how soon a valid input is passed.
type acceptor struct {
	// unsure: a keyword left to kube-openapi (oneOf and not, whose answer
	// depends on which branches fail; the keywords Validate refuses).
	unsure bool

	// type and format (kube-openapi's typeValidator).
	types       spec.StringOrArray
	nullable    bool
	format      string
	checkType   bool
	knownFormat bool

	// strings
	maxLength, minLength *int64
	pattern              *regexp.Regexp

	// numbers: numType and numFormat as kube-openapi's numberValidator
	// takes them; boundsFit says every bound fits them (else every number
	// is refused).
	numType, numFormat             string
	boundsFit                      bool
	maximum, minimum, multipleOf   *float64
	exclusiveMaximum, exclusiveMin bool

	// arrays
	items              *acceptor
	maxItems, minItems *int64

	enum []any

	// objects
	properties                   map[string]*acceptor
	required                     []string
	noAdditional                 bool
	additional                   *acceptor
	maxProperties, minProperties *int64

	allOf, anyOf []*acceptor
}

// newAcceptor compiles s, validated with formats.
func newAcceptor(s *spec.Schema, formats strfmt.Registry) *acceptor {
	a := &acceptor{
		types: s.Type, nullable: s.Nullable, format: s.Format,
		checkType:   len(s.Type) > 0 || s.Format != "",
		knownFormat: s.Format != "" && formats.ContainsName(s.Format),
		maxLength:   s.MaxLength, minLength: s.MinLength,
		maximum: s.Maximum, minimum: s.Minimum, multipleOf: s.MultipleOf,
		exclusiveMaximum: s.ExclusiveMaximum, exclusiveMin: s.ExclusiveMinimum,
		maxItems: s.MaxItems, minItems: s.MinItems,
		enum:     s.Enum,
		required: s.Required, maxProperties: s.MaxProperties, minProperties: s.MinProperties,
	}
	a.unsure = s.Ref.String() != "" || len(s.OneOf) > 0 || s.Not != nil || len(s.Dependencies) > 0 ||
		len(s.PatternProperties) > 0 || s.AdditionalItems != nil || s.UniqueItems ||
		(s.Items != nil && (s.Items.Schema == nil || len(s.Items.Schemas) > 0))
	if a.unsure {
		return a
	}
	if s.Pattern != "" {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return &acceptor{unsure: true}
		}
		a.pattern = re
	}
	if len(s.Type) == 1 {
		switch s.Type[0] {
		case "integer":
			a.numType = "integer"
			if s.Format == "int32" || s.Format == "int64" {
				a.numFormat = s.Format
			}
		case "number":
			a.numType = "number"
			if s.Format == "float" || s.Format == "double" {
				a.numFormat = s.Format
			}
		}
	}
	a.boundsFit = true
	for _, b := range []*float64{s.Maximum, s.Minimum, s.MultipleOf} {
		if b != nil && validate.IsValueValidAgainstRange(*b, a.numType, a.numFormat, "", "") != nil {
			a.boundsFit = false
		}
	}
	if s.Items != nil {
		a.items = newAcceptor(s.Items.Schema, formats)
	}
	if len(s.Properties) > 0 {
		a.properties = make(map[string]*acceptor, len(s.Properties))
		for name, prop := range s.Properties {
			a.properties[name] = newAcceptor(&prop, formats)
		}
	}
	if ap := s.AdditionalProperties; ap != nil {
		if !ap.Allows {
			a.noAdditional = true
		} else if ap.Schema != nil {
			a.additional = newAcceptor(ap.Schema, formats)
		}
	}
	for i := range s.AllOf {
		a.allOf = append(a.allOf, newAcceptor(&s.AllOf[i], formats))
	}
	for i := range s.AnyOf {
		a.anyOf = append(a.anyOf, newAcceptor(&s.AnyOf[i], formats))
	}
	return a
}

// accepts reports that kube-openapi finds no violation in v, a value as
// encoding/json decodes into an any; false means "not known to be valid".
func (a *acceptor) accepts(v any, formats strfmt.Registry) bool {
	if a.unsure {
		return false
	}
	if v == nil {
		// kube-openapi checks only the type and the enum of a null.
		return (len(a.types) == 0 || a.types.Contains("null") || a.nullable) && len(a.enum) == 0
	}
	if a.checkType && !a.typeAccepts(v) {
		return false
	}
	for _, sub := range a.allOf {
		if !sub.accepts(v, formats) {
			return false
		}
	}
	if len(a.anyOf) > 0 && !slices.ContainsFunc(a.anyOf, func(sub *acceptor) bool { return sub.accepts(v, formats) }) {
		return false
	}
	switch v := v.(type) {
	case string:
		if !a.stringAccepts(v, formats) {
			return false
		}
	case float64:
		if !a.numberAccepts(v) {
			return false
		}
	case []any:
		if !a.arrayAccepts(v, formats) {
			return false
		}
	case map[string]any:
		if !a.objectAccepts(v, formats) {
			return false
		}
	case bool:
	default:
		return false
	}
	return len(a.enum) == 0 || slices.ContainsFunc(a.enum, func(e any) bool { return enumMatches(v, e) })
}

// typeAccepts is kube-openapi's typeValidator for a decoded JSON value.
func (a *acceptor) typeAccepts(v any) bool {
	var schType, format string
	stringOrArray := false
	switch v.(type) {
	case bool:
		schType = "boolean"
	case string:
		schType, stringOrArray = "string", true
	case float64:
		schType, format = "number", "float64"
	case []any:
		schType, stringOrArray = "array", true
	case map[string]any:
		schType = "object"
	default:
		return false
	}
	isFloatInt := schType == "number" && conv.IsFloat64AJSONInteger(v.(float64)) && a.types.Contains("integer")
	if !stringOrArray && a.format != "" && !(a.types.Contains(schType) || format == a.format || isFloatInt) {
		return false
	}
	if !(a.types.Contains("number") || a.types.Contains("integer")) && a.format != "" && stringOrArray {
		return true
	}
	return a.types.Contains(schType) || isFloatInt
}

func (a *acceptor) stringAccepts(s string, formats strfmt.Registry) bool {
	if a.maxLength != nil || a.minLength != nil {
		n := int64(utf8.RuneCountInString(s))
		if (a.maxLength != nil && n > *a.maxLength) || (a.minLength != nil && n < *a.minLength) {
			return false
		}
	}
	if a.pattern != nil && !a.pattern.MatchString(s) {
		return false
	}
	return !a.knownFormat || formats.Validates(a.format, s)
}

func (a *acceptor) numberAccepts(f float64) bool {
	if !a.boundsFit || validate.IsValueValidAgainstRange(f, a.numType, a.numFormat, "", "") != nil {
		return false
	}
	return (a.multipleOf == nil || validate.MultipleOf("", "", f, *a.multipleOf) == nil) &&
		(a.maximum == nil || validate.Maximum("", "", f, *a.maximum, a.exclusiveMaximum) == nil) &&
		(a.minimum == nil || validate.Minimum("", "", f, *a.minimum, a.exclusiveMin) == nil)
}

func (a *acceptor) arrayAccepts(list []any, formats strfmt.Registry) bool {
	n := int64(len(list))
	if (a.maxItems != nil && n > *a.maxItems) || (a.minItems != nil && n < *a.minItems) {
		return false
	}
	if a.items != nil {
		for _, item := range list {
			if !a.items.accepts(item, formats) {
				return false
			}
		}
	}
	return true
}

func (a *acceptor) objectAccepts(m map[string]any, formats strfmt.Registry) bool {
	n := int64(len(m))
	if (a.maxProperties != nil && n > *a.maxProperties) || (a.minProperties != nil && n < *a.minProperties) {
		return false
	}
	for key, value := range m {
		prop, ok := a.properties[key]
		switch {
		case ok:
			if !prop.accepts(value, formats) {
				return false
			}
		case a.noAdditional:
			return false
		case a.additional != nil:
			if !a.additional.accepts(value, formats) {
				return false
			}
		}
	}
	for _, name := range a.required {
		if _, ok := m[name]; !ok {
			return false
		}
	}
	return true
}

// enumMatches is kube-openapi's basicCommonValidator's test of one enum
// value, without reflection when both are the same scalar type.
func enumMatches(v, e any) bool {
	switch v := v.(type) {
	case string:
		if e, ok := e.(string); ok {
			return v == e
		}
	case float64:
		if e, ok := e.(float64); ok {
			return v == e
		}
	case bool:
		if e, ok := e.(bool); ok {
			return v == e
		}
	}
	enumType := reflect.TypeOf(e)
	if enumType == nil {
		return false
	}
	value := reflect.ValueOf(v)
	return value.IsValid() && value.Type().ConvertibleTo(enumType) && reflect.DeepEqual(value.Convert(enumType).Interface(), e)
}
