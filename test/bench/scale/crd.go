package main

import (
	"fmt"
	"strings"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver/openapi"
)

// The baseline serves Runs as a CRD in a group of its own, so it never
// collides with the kruntimes.io APIService.
const (
	crdGroup    = "bench.kruntimes.io"
	crdVersion  = "v1alpha1"
	crdResource = "runs"
)

// crdObject is a CustomResourceDefinition for Runs whose schema is the
// served OpenAPI schema of v1alpha1.Run, with status as a subresource.
func crdObject() (map[string]any, error) {
	defs := openapi.GetOpenAPIDefinitions(func(path string) spec.Ref { return spec.MustCreateRef("#/definitions/" + path) })
	root, ok := defs[v1alpha1.Run{}.OpenAPIModelName()]
	if !ok {
		return nil, fmt.Errorf("no OpenAPI definition of %s", v1alpha1.Run{}.OpenAPIModelName())
	}
	schema, err := structural(defs, root.Schema, 0)
	if err != nil {
		return nil, err
	}
	// A CRD's metadata is the apiserver's to validate.
	schema["properties"].(map[string]any)["metadata"] = map[string]any{"type": "object"}
	return map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": crdResource + "." + crdGroup},
		"spec": map[string]any{
			"group": crdGroup,
			"scope": "Namespaced",
			"names": map[string]any{"plural": crdResource, "singular": "run", "kind": "Run", "listKind": "RunList"},
			"versions": []any{map[string]any{
				"name": crdVersion, "served": true, "storage": true,
				"schema":       map[string]any{"openAPIV3Schema": schema},
				"subresources": map[string]any{"status": map[string]any{}},
			}},
		},
	}, nil
}

// formats a CRD schema accepts.
var crdFormats = map[string]bool{"int32": true, "int64": true, "date-time": true, "byte": true, "double": true, "float": true}

// structural turns an OpenAPI v2 schema into a CRD's structural schema:
// references inlined, descriptions and patch directives dropped.
func structural(defs map[string]common.OpenAPIDefinition, s spec.Schema, depth int) (map[string]any, error) {
	if depth > 32 {
		return nil, fmt.Errorf("the schema nests deeper than 32 levels")
	}
	if ref := s.Ref.String(); ref != "" {
		def, ok := defs[strings.TrimPrefix(ref, "#/definitions/")]
		if !ok {
			return nil, fmt.Errorf("no OpenAPI definition of %s", ref)
		}
		return structural(defs, def.Schema, depth+1)
	}
	out := map[string]any{}
	switch {
	case s.Format == "int-or-string":
		out["x-kubernetes-int-or-string"] = true
	case len(s.Type) > 0:
		out["type"] = s.Type[0]
		if crdFormats[s.Format] {
			out["format"] = s.Format
		}
	case len(s.OneOf) > 0 || len(s.AnyOf) > 0:
		// Quantity and similar: a string or a number, kept as given.
		out["x-kubernetes-int-or-string"] = true
	default:
		out["type"] = "object"
		out["x-kubernetes-preserve-unknown-fields"] = true
	}
	if len(s.Properties) > 0 {
		props := map[string]any{}
		for name, p := range s.Properties {
			ps, err := structural(defs, p, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			props[name] = ps
		}
		out["properties"] = props
		if len(s.Required) > 0 {
			out["required"] = s.Required
		}
	}
	if s.Items != nil && s.Items.Schema != nil {
		items, err := structural(defs, *s.Items.Schema, depth+1)
		if err != nil {
			return nil, err
		}
		out["items"] = items
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		ap, err := structural(defs, *s.AdditionalProperties.Schema, depth+1)
		if err != nil {
			return nil, err
		}
		out["additionalProperties"] = ap
	}
	for _, ext := range []string{"x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type"} {
		if v, ok := s.Extensions[ext]; ok {
			out[ext] = v
		}
	}
	return out, nil
}
