// Package layering holds no code: its test checks the import graph of the
// module against the layout DESIGN.md and STYLE.md lay down, so a shared
// contract cannot drift back into one side's folder unnoticed.
package layering
