package toolschema

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	openapierrors "k8s.io/kube-openapi/pkg/validation/errors"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

// MaxViolations bounds the violations one validation reports: a 1 MiB body
// can break a schema in more ways than an answer should list.
const MaxViolations = 64

// InputPath is the root of the paths of an input's violations.
var InputPath = field.NewPath("input")

// Validator validates JSON documents against one compiled schema, with the
// validator CRDs' objects go through (kube-openapi's). It is safe for
// concurrent use.
type Validator struct {
	// accept passes, without kube-openapi, the documents in which
	// kube-openapi would find no violation: most of them, and the ones
	// whose cost is paid on every invocation.
	accept *acceptor
	schema *validate.SchemaValidator
}

// Compile compiles raw, a schema that passed Validate.
func Compile(raw []byte) (*Validator, error) {
	s := &spec.Schema{}
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("compile the schema: %w", err)
	}
	return &Validator{
		accept: newAcceptor(s, strfmt.Default),
		schema: validate.NewSchemaValidator(s, nil, "", strfmt.Default, rootPropertyValidators(s)...),
	}, nil
}

// rootPropertyValidators builds, once, the validators of the root's
// properties, which kube-openapi otherwise builds again for every
// document (about half of what validating a flat object costs). Only
// when the root has no allOf, anyOf, oneOf or not: their branches get the
// root's options too, and a property of the same name there has another
// schema.
func rootPropertyValidators(s *spec.Schema) []validate.Option {
	if len(s.Properties) == 0 || len(s.AllOf) > 0 || len(s.AnyOf) > 0 || len(s.OneOf) > 0 || s.Not != nil {
		return nil
	}
	byName := make(map[string]*validate.SchemaValidator, len(s.Properties))
	for name, prop := range s.Properties {
		// The path is the one kube-openapi gives a root property.
		byName[name] = validate.NewSchemaValidator(&prop, nil, name, strfmt.Default)
	}
	return []validate.Option{func(o *validate.SchemaValidatorOptions) {
		o.NewValidatorForField = func(field string, schema *spec.Schema, rootSchema any, root string, formats strfmt.Registry, opts ...validate.Option) validate.ValueValidator {
			// Called for the root's properties and, with additionalProperties,
			// for other keys of the document, which are not kept.
			if v, ok := byName[field]; ok && root == field {
				return v
			}
			return validate.NewSchemaValidator(schema, rootSchema, root, formats, opts...)
		}
	}}
}

// Validate returns every way (at most MaxViolations) in which doc, one JSON
// document, breaks the schema, each with its path below InputPath.
func (v *Validator) Validate(doc []byte) field.ErrorList {
	var value any
	if err := json.Unmarshal(doc, &value); err != nil {
		return field.ErrorList{field.Invalid(InputPath, "", "is not JSON: "+err.Error())}
	}
	if v.accept.accepts(value, strfmt.Default) {
		return nil
	}
	result := v.schema.Validate(value)
	if result.IsValid() {
		return nil
	}
	return resultErrors(InputPath, result)
}

// resultErrors is kube-openapi's result as field errors, as apiextensions
// reports a custom resource's violations.
func resultErrors(root *field.Path, result *validate.Result) field.ErrorList {
	var allErrs field.ErrorList
	for i, err := range result.Errors {
		if i == MaxViolations {
			allErrs = append(allErrs, field.Forbidden(root, fmt.Sprintf("and %d more violations, not listed", len(result.Errors)-MaxViolations)))
			break
		}
		verr, ok := err.(*openapierrors.Validation)
		if !ok {
			allErrs = append(allErrs, field.Invalid(root, "", err.Error()))
			continue
		}
		p := root
		if name := strings.TrimPrefix(verr.Name, "."); name != "" {
			p = root.Child(name)
		}
		switch verr.Code() {
		case openapierrors.RequiredFailCode:
			allErrs = append(allErrs, field.Required(p, ""))
		case openapierrors.EnumFailCode:
			allowed := make([]string, 0, len(verr.Values))
			for _, a := range verr.Values {
				if s, ok := a.(string); ok {
					allowed = append(allowed, s)
					continue
				}
				b, _ := json.Marshal(a)
				allowed = append(allowed, string(b))
			}
			allErrs = append(allErrs, field.NotSupported(p, shortValue(verr.Value), allowed))
		case openapierrors.UnallowedPropertyCode:
			key, _ := verr.Value.(string)
			allErrs = append(allErrs, field.Forbidden(p.Child(key), "is not a property the schema allows"))
		case openapierrors.InvalidTypeCode:
			allErrs = append(allErrs, field.TypeInvalid(p, shortValue(verr.Value), verr.Error()))
		default:
			allErrs = append(allErrs, field.Invalid(p, shortValue(verr.Value), verr.Error()))
		}
	}
	return allErrs
}
