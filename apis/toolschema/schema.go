package toolschema

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of a function's declared description and schemas.
const (
	MaxDescriptionBytes = 1 << 10
	MaxSchemaBytes      = 64 << 10
	// MaxDepth bounds how deeply schemas nest (properties, items, allOf,
	// …): deep enough for any tool's arguments, shallow enough that
	// checking and validating never recurse without bound.
	MaxDepth = 32
)

// types are the values of "type", as in a CRD's openAPIV3Schema: "null" is
// spelled nullable: true.
var types = []string{"array", "boolean", "integer", "number", "object", "string"}

// keywordKind says what a keyword's value must be.
type keywordKind int

const (
	kindString keywordKind = iota
	kindBool
	kindFalse // uniqueItems
	kindNumber
	kindCount // a non-negative integer
	kindAny
	kindStrings        // an array of distinct strings
	kindNonEmptyArray  // enum
	kindSchema         // items, not
	kindSchemaOrBool   // additionalProperties
	kindSchemaArray    // allOf, anyOf, oneOf
	kindSchemaMap      // properties
	kindRegexp         // pattern
	kindType           // type
	kindPositiveNumber // multipleOf
)

// keywords are those of the CRD subset (apiextensions' JSONSchemaProps)
// that mean something for a function's JSON; the Kubernetes extensions
// (x-kubernetes-*) do not.
var keywords = map[string]keywordKind{
	"type": kindType, "format": kindString, "title": kindString, "description": kindString,
	"default": kindAny, "example": kindAny, "nullable": kindBool, "enum": kindNonEmptyArray,
	"maximum": kindNumber, "exclusiveMaximum": kindBool, "minimum": kindNumber, "exclusiveMinimum": kindBool,
	"multipleOf": kindPositiveNumber, "maxLength": kindCount, "minLength": kindCount, "pattern": kindRegexp,
	"maxItems": kindCount, "minItems": kindCount, "uniqueItems": kindFalse, "maxProperties": kindCount,
	"minProperties": kindCount, "required": kindStrings, "items": kindSchema, "allOf": kindSchemaArray,
	"anyOf": kindSchemaArray, "oneOf": kindSchemaArray, "not": kindSchema, "properties": kindSchemaMap,
	"additionalProperties": kindSchemaOrBool,
}

// unsupported are JSON Schema keywords a CRD's schema refuses, with why.
var unsupported = map[string]string{
	"$ref":              "references are not supported: inline the schema",
	"definitions":       "definitions are not supported: inline each schema where it is used",
	"$defs":             "definitions are not supported: inline each schema where it is used",
	"$schema":           "is not supported: the dialect is the OpenAPI v3 subset CRDs use",
	"id":                "is not supported",
	"$id":               "is not supported",
	"patternProperties": "is not supported: use additionalProperties",
	"dependencies":      "is not supported",
	"additionalItems":   "is not supported: items is one schema for every element",
	"const":             "is not supported in OpenAPI v3: use an enum of one value",
}

// Validate checks that raw is a JSON Schema a function may declare: at
// most MaxSchemaBytes, a JSON object whose root is of type object, using
// only the keywords of the CRD subset, each with a value of the right
// shape. Errors carry the path inside the schema below fldPath, e.g.
// spec.mode.function.schema.input.properties[city].type.
func Validate(raw []byte, fldPath *field.Path) field.ErrorList {
	switch {
	case len(raw) == 0:
		return field.ErrorList{field.Required(fldPath, "a JSON Schema object; leave the field unset to declare none")}
	case len(raw) > MaxSchemaBytes:
		return field.ErrorList{field.TooLong(fldPath, "", MaxSchemaBytes)}
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return field.ErrorList{field.Invalid(fldPath, "", "is not JSON: "+err.Error())}
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return field.ErrorList{field.Invalid(fldPath, "", "must be a JSON Schema object")}
	}
	allErrs := checkSchema(root, fldPath, 0)
	const rootObject = `the root of a function's schema is type: object (its arguments by name), as tools take`
	switch t, ok := root["type"]; {
	case !ok:
		allErrs = append(allErrs, field.Required(fldPath.Child("type"), rootObject))
	case t != "object":
		allErrs = append(allErrs, field.Invalid(fldPath.Child("type"), shortValue(t), rootObject))
	}
	if len(allErrs) == 0 {
		if _, err := Compile(raw); err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath, "", err.Error()))
		}
	}
	return allErrs
}

func checkSchema(s map[string]any, p *field.Path, depth int) field.ErrorList {
	if depth > MaxDepth {
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf("schemas nest at most %d deep", MaxDepth))}
	}
	var allErrs field.ErrorList
	names := make([]string, 0, len(s))
	for k := range s {
		names = append(names, k)
	}
	// Report in a stable order.
	sort.Strings(names)
	for _, k := range names {
		v, kp := s[k], p.Child(k)
		kind, known := keywords[k]
		if !known {
			if why, ok := unsupported[k]; ok {
				allErrs = append(allErrs, field.Forbidden(kp, why))
			} else {
				allErrs = append(allErrs, field.Forbidden(kp, "is not a keyword of the OpenAPI v3 schema subset CRDs use"))
			}
			continue
		}
		allErrs = append(allErrs, checkKeyword(kind, v, kp, depth)...)
	}
	return allErrs
}

func checkKeyword(kind keywordKind, v any, p *field.Path, depth int) field.ErrorList {
	invalid := func(why string) field.ErrorList {
		return field.ErrorList{field.Invalid(p, shortValue(v), why)}
	}
	switch kind {
	case kindString:
		if _, ok := v.(string); !ok {
			return invalid("must be a string")
		}
	case kindType:
		t, ok := v.(string)
		if !ok {
			return invalid("must be one type name; for null use nullable: true, for several use anyOf")
		}
		if i := sort.SearchStrings(types, t); i == len(types) || types[i] != t {
			return field.ErrorList{field.NotSupported(p, t, types)}
		}
	case kindRegexp:
		pattern, ok := v.(string)
		if !ok {
			return invalid("must be a string")
		}
		if _, err := regexp.Compile(pattern); err != nil {
			return invalid("must be a regular expression (RE2): " + err.Error())
		}
	case kindBool:
		if _, ok := v.(bool); !ok {
			return invalid("must be true or false")
		}
	case kindFalse:
		if v != false {
			return field.ErrorList{field.Forbidden(p, "only false is supported (as in CRDs: uniqueness costs quadratic time)")}
		}
	case kindNumber:
		if _, ok := v.(float64); !ok {
			return invalid("must be a number")
		}
	case kindPositiveNumber:
		if n, ok := v.(float64); !ok || n <= 0 {
			return invalid("must be a number greater than 0")
		}
	case kindCount:
		if n, ok := v.(float64); !ok || n < 0 || n != float64(int64(n)) {
			return invalid("must be a non-negative integer")
		}
	case kindAny:
	case kindStrings:
		list, ok := v.([]any)
		if !ok {
			return invalid("must be an array of strings")
		}
		seen := make(map[string]bool, len(list))
		var allErrs field.ErrorList
		for i, item := range list {
			s, ok := item.(string)
			switch {
			case !ok:
				allErrs = append(allErrs, field.Invalid(p.Index(i), shortValue(item), "must be a string"))
			case seen[s]:
				allErrs = append(allErrs, field.Duplicate(p.Index(i), s))
			}
			seen[s] = true
		}
		return allErrs
	case kindNonEmptyArray:
		if list, ok := v.([]any); !ok || len(list) == 0 {
			return invalid("must be a non-empty array of the allowed values")
		}
	case kindSchema:
		sub, ok := v.(map[string]any)
		if !ok {
			return invalid("must be a schema (a JSON object)")
		}
		return checkSchema(sub, p, depth+1)
	case kindSchemaOrBool:
		if _, ok := v.(bool); ok {
			return nil
		}
		sub, ok := v.(map[string]any)
		if !ok {
			return invalid("must be true, false or a schema")
		}
		return checkSchema(sub, p, depth+1)
	case kindSchemaArray:
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return invalid("must be a non-empty array of schemas")
		}
		var allErrs field.ErrorList
		for i, item := range list {
			sub, ok := item.(map[string]any)
			if !ok {
				allErrs = append(allErrs, field.Invalid(p.Index(i), shortValue(item), "must be a schema (a JSON object)"))
				continue
			}
			allErrs = append(allErrs, checkSchema(sub, p.Index(i), depth+1)...)
		}
		return allErrs
	case kindSchemaMap:
		props, ok := v.(map[string]any)
		if !ok {
			return invalid("must be an object of schemas by property name")
		}
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
		}
		sort.Strings(names)
		var allErrs field.ErrorList
		for _, name := range names {
			sub, ok := props[name].(map[string]any)
			if !ok {
				allErrs = append(allErrs, field.Invalid(p.Key(name), shortValue(props[name]), "must be a schema (a JSON object)"))
				continue
			}
			allErrs = append(allErrs, checkSchema(sub, p.Key(name), depth+1)...)
		}
		return allErrs
	}
	return nil
}

// shortValue is v for an error message: a scalar as it is, anything
// larger elided so a 64 KiB schema does not end up in a 422.
func shortValue(v any) any {
	switch v.(type) {
	case map[string]any:
		return "{…}"
	case []any:
		return "[…]"
	case string:
		if s := v.(string); len(s) > 64 {
			return s[:64] + "…"
		}
	}
	return v
}
