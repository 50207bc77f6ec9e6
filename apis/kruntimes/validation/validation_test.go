package validation

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// boundCase changes one field of a valid object to a value at or just past
// one bound of the API. A case without wantField expects the object to stay
// valid; a case with one expects exactly one error, of wantType at wantField.
type boundCase[T any] struct {
	name      string
	mutate    func(T)
	wantType  field.ErrorType
	wantField string
}

// accepted and rejected name the two halves of a bound's test, so the table
// reads as the limit and the first value past it.
func accepted[T any](name string, mutate func(T)) boundCase[T] {
	return boundCase[T]{name: name, mutate: mutate}
}

func rejected[T any](name string, mutate func(T), wantType field.ErrorType, wantField string) boundCase[T] {
	return boundCase[T]{name: name, mutate: mutate, wantType: wantType, wantField: wantField}
}

// assertErrors checks errs against what tc expects. Errors are printed by
// type and field only: a value at a bound can be hundreds of KiB.
func (tc boundCase[T]) assertErrors(t *testing.T, errs field.ErrorList) {
	t.Helper()
	if tc.wantField == "" {
		assert.Empty(t, summarize(errs), "a value at the bound must be accepted")
		return
	}
	require.Len(t, errs, 1, "want exactly one %s error at %s, got %v", tc.wantType, tc.wantField, summarize(errs))
	assert.Equal(t, tc.wantType, errs[0].Type, "error type")
	assert.Equal(t, tc.wantField, errs[0].Field, "error field")
}

func summarize(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, string(e.Type)+" at "+e.Field)
	}
	return out
}
