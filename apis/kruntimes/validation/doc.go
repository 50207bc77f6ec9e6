// Package validation checks Runs and Runtimes for create, update and status
// update, returning field.ErrorLists with paths so every rejection is a 422
// that names the offending field. The registry strategies only call it.
package validation
