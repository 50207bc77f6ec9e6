// Package run is the registry of Runs: the strategies that validate creates,
// updates and status updates, the selectable fields, the kubectl table, and
// the REST storage for runs, runs/status and runs/invoke, which reaches the
// owning runtimed through an injected Router.
package run
