package lifecycle

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docsPhase is what the "Phases" table of docs/api.md says about one phase.
type docsPhase struct {
	terminal, holdsCapacity, routable bool
	next                              map[Mode][]Phase
	// retries are the next phases marked with "*".
	retries map[Mode][]Phase
}

// TestDocsPhaseTable holds docs/api.md to the code: its "Phases" table must
// state exactly the transitions CheckTransition allows, for every from × to ×
// mode, and the classes and retries of every phase.
func TestDocsPhaseTable(t *testing.T) {
	docs := readDocsPhaseTable(t)
	for _, p := range Phases() {
		require.Contains(t, docs, p, "docs/api.md has no row for %s", p)
	}
	require.Len(t, docs, len(Phases()), "docs/api.md names a phase the code does not know")

	for _, from := range Phases() {
		doc := docs[from]
		assert.Equal(t, IsTerminal(from), doc.terminal, "docs/api.md: is %s terminal", from)
		assert.Equal(t, HoldsCapacity(from), doc.holdsCapacity, "docs/api.md: does %s hold capacity", from)
		assert.Equal(t, IsRoutable(from), doc.routable, "docs/api.md: is %s routable", from)
		for _, mode := range []Mode{ModeTask, ModeFunction} {
			for _, to := range Phases() {
				// The text under the table: an update may keep the phase,
				// except that a task is never Ready.
				documented := slices.Contains(doc.next[mode], to) ||
					from == to && !(mode == ModeTask && to == Ready)
				allowed := CheckTransition(mode, from, to) == nil
				assert.Equal(t, allowed, documented,
					"may a %s Run go %s → %s? expected is CheckTransition's answer, actual docs/api.md's", mode, from, to)
			}
			for _, to := range doc.next[mode] {
				assert.Equal(t, IsRetry(from, to), slices.Contains(doc.retries[mode], to),
					"docs/api.md: is %s → %s a retry (marked *) for a %s Run", from, to, mode)
			}
		}
	}
}

// readDocsPhaseTable parses the table that follows the "### Phases" heading
// of docs/api.md, up to the first blank line after it.
func readDocsPhaseTable(t *testing.T) map[Phase]docsPhase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "api.md"))
	require.NoError(t, err)

	var table [][]string
	inSection := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "### Phases":
			inSection = true
		case inSection && strings.HasPrefix(line, "|"):
			table = append(table, splitRow(line))
		case inSection && line == "" && len(table) > 0:
			inSection = false
		}
	}
	require.Greater(t, len(table), 2, `docs/api.md has no table under "### Phases"`)

	column := map[string]int{}
	for i, name := range table[0] {
		column[name] = i
	}
	for _, name := range []string{"phase", "terminal", "holds capacity", "routable", "next phases (task)", "next phases (function)"} {
		require.Contains(t, column, name, "docs/api.md phase table lost its %q column", name)
	}

	docs := map[Phase]docsPhase{}
	for _, row := range table[2:] { // after the header and the --- row
		require.Len(t, row, len(table[0]), "docs/api.md phase row %v", row)
		doc := docsPhase{
			terminal:      isYes(t, row[column["terminal"]]),
			holdsCapacity: isYes(t, row[column["holds capacity"]]),
			routable:      isYes(t, row[column["routable"]]),
			next:          map[Mode][]Phase{},
			retries:       map[Mode][]Phase{},
		}
		doc.next[ModeTask], doc.retries[ModeTask] = parseNextPhases(t, row[column["next phases (task)"]])
		if fn := row[column["next phases (function)"]]; fn == "same" {
			doc.next[ModeFunction], doc.retries[ModeFunction] = doc.next[ModeTask], doc.retries[ModeTask]
		} else {
			doc.next[ModeFunction], doc.retries[ModeFunction] = parseNextPhases(t, fn)
		}
		for _, name := range strings.Split(row[column["phase"]], ",") {
			p := Phase(strings.TrimSpace(name))
			require.True(t, IsKnown(p), "docs/api.md phase table names unknown phase %q", p)
			require.NotContains(t, docs, p, "docs/api.md phase table has two rows for %s", p)
			docs[p] = doc
		}
	}
	return docs
}

// parseNextPhases reads a cell such as "Succeeded, Pending*, Failed" or
// "— (a task is never Ready)" into the phases it names and those of them
// marked "*" as retries.
func parseNextPhases(t *testing.T, cell string) (next, retries []Phase) {
	t.Helper()
	if strings.HasPrefix(cell, "—") {
		return nil, nil
	}
	for _, name := range strings.Split(cell, ",") {
		name = strings.TrimSpace(name)
		p := Phase(strings.TrimSuffix(name, "*"))
		require.True(t, IsKnown(p), "docs/api.md phase table names unknown phase %q", name)
		if strings.HasSuffix(name, "*") {
			retries = append(retries, p)
		}
		next = append(next, p)
	}
	return next, retries
}

func splitRow(line string) []string {
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

func isYes(t *testing.T, cell string) bool {
	t.Helper()
	require.Contains(t, []string{"yes", ""}, cell, "docs/api.md phase table: a class cell is yes or empty")
	return cell == "yes"
}

// repoRoot is the directory of go.mod above the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's directory")
		dir = parent
	}
}
