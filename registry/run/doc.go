// Package run is the registry of Runs: the strategies that validate creates,
// updates and status updates, the selectable fields, the kubectl table, and
// the REST storage for runs and runs/status.
package run
