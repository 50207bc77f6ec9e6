// Package options holds the flags of kruntimes-runtime and its wiring: the
// language adapter, the Runtime Server over it, and the unix socket it serves
// on until SIGTERM. cmd/kruntimes-runtime only runs the command it builds.
package options
