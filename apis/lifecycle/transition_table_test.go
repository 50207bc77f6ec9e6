package lifecycle

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modes says which kinds of Run may make one transition.
type modes struct{ task, function bool }

// The cells of transitionTable: task and function, task only, function only,
// neither.
var (
	TF = modes{task: true, function: true}
	T_ = modes{task: true}
	_F = modes{function: true}
	__ = modes{}
)

// tableColumns is the order of transitionTable's columns.
var tableColumns = [8]Phase{Pending, Scheduled, Running, Ready, Succeeded, Failed, Timeout, Cancelled}

// transitionTable is every single-update transition, written out rather than
// derived from classes: a row is the phase a Run is in, a column the phase a
// status update writes, a cell the modes it is allowed for. The diagonal is
// an update that keeps the phase. docs/api.md ("Phases") states the same
// table as lists of next phases; TestDocsPhaseTable holds the two together.
var transitionTable = map[Phase][8]modes{
	// to:      Pe  Sc  Ru  Re  Su  Fa  Ti  Ca   (the order of tableColumns)
	Pending:   {TF, TF, __, __, __, TF, __, TF},
	Scheduled: {TF, TF, TF, __, __, TF, __, TF},
	Running:   {TF, __, TF, _F, T_, TF, TF, TF},
	Ready:     {_F, __, _F, _F, __, _F, _F, _F},
	Succeeded: {__, __, __, __, TF, __, __, __},
	Failed:    {__, __, __, __, __, TF, __, __},
	Timeout:   {__, __, __, __, __, __, TF, __},
	Cancelled: {__, __, __, __, __, __, __, TF},
}

func TestCheckTransitionMatchesTheTable(t *testing.T) {
	require.ElementsMatch(t, Phases(), tableColumns[:], "every phase has a column, and no other")
	require.Len(t, transitionTable, len(Phases()), "every phase has a row")

	for _, from := range tableColumns {
		row, ok := transitionTable[from]
		require.True(t, ok, "no row for %s", from)
		for i, to := range tableColumns {
			for _, m := range []struct {
				mode    Mode
				allowed bool
			}{{ModeTask, row[i].task}, {ModeFunction, row[i].function}} {
				verdict := "is rejected"
				if m.allowed {
					verdict = "is allowed"
				}
				t.Run(fmt.Sprintf("%s %s → %s %s", m.mode, from, to, verdict), func(t *testing.T) {
					err := CheckTransition(m.mode, from, to)
					if m.allowed {
						assert.NoError(t, err)
					} else {
						assert.Error(t, err)
					}
				})
			}
		}
	}
}
