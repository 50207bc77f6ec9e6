// Package toolschema is the contract of a function Run's declared schemas:
// it checks that a spec.mode.function.schema document is a JSON Schema in
// the OpenAPI v3 subset CustomResourceDefinitions use, and compiles it into
// the validator runs/invoke applies to every body before dispatch.
package toolschema
