// Package outputs parses and bounds the key/value outputs a task or function
// hands back. The bounds are those of Run.status.outputs, so whatever a
// Runtime Server accepts can be written to the Run without further checks.
package outputs
