package lifecycle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryPhaseIsClassified parses this package's source so that a Phase
// constant added without an entry in classes and Phases() fails here.
func TestEveryPhaseIsClassified(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "phase.go", nil, 0)
	require.NoError(t, err)
	var declared []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Phase" {
			for _, name := range vs.Names {
				declared = append(declared, name.Name)
			}
		}
		return true
	})
	require.Len(t, declared, len(Phases()), "every Phase constant must be listed in Phases()")
	for _, p := range Phases() {
		_, ok := Classify(p)
		assert.True(t, ok, "phase %s has no class", p)
	}
	assert.Len(t, classes, len(Phases()))
}

func TestClassification(t *testing.T) {
	cases := []struct {
		phase                                               Phase
		terminal, active, holdsCapacity, assigned, routable bool
	}{
		{Pending, false, false, false, false, false},
		{Scheduled, false, true, true, true, false},
		{Running, false, true, true, true, false},
		{Ready, false, true, true, true, true},
		{Succeeded, true, false, false, false, false},
		{Failed, true, false, false, false, false},
		{Timeout, true, false, false, false, false},
		{Cancelled, true, false, false, false, false},
	}
	require.Len(t, cases, len(Phases()), "classify every phase here too")
	for _, tc := range cases {
		t.Run(string(tc.phase), func(t *testing.T) {
			assert.Equal(t, tc.terminal, IsTerminal(tc.phase), "terminal")
			assert.Equal(t, tc.active, IsActive(tc.phase), "active")
			assert.Equal(t, tc.holdsCapacity, HoldsCapacity(tc.phase), "holds capacity")
			assert.Equal(t, tc.assigned, IsAssigned(tc.phase), "assigned")
			assert.Equal(t, tc.routable, IsRoutable(tc.phase), "routable")
		})
	}
	assert.False(t, IsKnown("Bogus"))
}

func TestCheckTransition(t *testing.T) {
	cases := []struct {
		name     string
		mode     Mode
		from, to Phase
		ok       bool
	}{
		{"task walks Pending → Scheduled", ModeTask, Pending, Scheduled, true},
		{"task walks Scheduled → Running", ModeTask, Scheduled, Running, true},
		{"task walks Running → Succeeded", ModeTask, Running, Succeeded, true},
		{"task Running → Failed", ModeTask, Running, Failed, true},
		{"task Running → Timeout", ModeTask, Running, Timeout, true},
		{"task Running → Cancelled", ModeTask, Running, Cancelled, true},
		{"task Running → Pending (retry)", ModeTask, Running, Pending, true},
		{"task never enters Ready", ModeTask, Running, Ready, false},
		{"task never stays Ready", ModeTask, Ready, Ready, false},
		{"function Running → Ready", ModeFunction, Running, Ready, true},
		{"function Ready → Running re-registers", ModeFunction, Ready, Running, true},
		{"function Ready → Pending (retry)", ModeFunction, Ready, Pending, true},
		{"function Ready → Timeout", ModeFunction, Ready, Timeout, true},
		{"function never Succeeds", ModeFunction, Running, Succeeded, false},
		{"Succeeded → Running is rejected", ModeTask, Succeeded, Running, false},
		{"Cancelled → Pending is rejected", ModeFunction, Cancelled, Pending, false},
		{"Failed → Failed stays", ModeTask, Failed, Failed, true},
		{"Pending → Running skips scheduling", ModeTask, Pending, Running, false},
		{"Pending → Cancelled", ModeTask, Pending, Cancelled, true},
		{"Scheduled → Pending unbinds", ModeFunction, Scheduled, Pending, true},
		{"unknown target", ModeTask, Pending, "Bogus", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTransition(tc.mode, tc.from, tc.to)
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

func TestIsRetry(t *testing.T) {
	assert.True(t, IsRetry(Running, Pending))
	assert.True(t, IsRetry(Ready, Pending))
	assert.True(t, IsRetry(Ready, Running), "re-registering on the same Pod is a new attempt")
	assert.False(t, IsRetry(Running, Ready))
	assert.False(t, IsRetry(Scheduled, Pending))
	assert.False(t, IsRetry(Pending, Pending))
}
