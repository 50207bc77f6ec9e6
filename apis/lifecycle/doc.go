// Package lifecycle holds the Run phase enum and the one classification of
// every phase (terminal, active, holds capacity, routable, allowed
// transitions), plus the condition types, reasons, finalizers and labels every
// kruntimes component shares. Nobody spells "Ready" twice.
package lifecycle
