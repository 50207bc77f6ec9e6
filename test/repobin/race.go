//go:build race

package repobin

// RaceEnabled reports whether this binary was built with -race.
const RaceEnabled = true
