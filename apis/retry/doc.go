// Package retry is the one retry policy of kruntimes, as pure functions over
// the v1alpha1 types: Decide whether a failed attempt is tried again, the
// backoff Delay, the NotBefore time the scheduler waits, and the one Requeue
// transition back to Pending. runtimed, the scheduler and the recovery
// controller all use it, so a Run is retried the same way whoever noticed.
package retry
