// Package recovery is the recovery controller: it recovers the Runs of a
// Runtime Pod that is lost — gone, deleting, or silent past a grace period —
// by making their assignment unroutable, confirming a fence, and only then
// sending them back to Pending for their next attempt, or failing them.
package recovery
