// Package runstatus computes the status runtimed writes for a task Run: the
// claim, the terminal outcome of an execution, a retry back to Pending, and
// the bounded message. It is pure: callers write the result with
// UpdateStatus and the object's resourceVersion.
package runstatus
