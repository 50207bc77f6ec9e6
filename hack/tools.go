//go:build tools

// Package tools keeps the code generators in go.mod so hack/ scripts run the
// pinned versions.
package tools

import _ "k8s.io/code-generator"
