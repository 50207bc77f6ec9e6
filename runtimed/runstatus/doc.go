// Package runstatus is what runtimed writes to a Run: the status of a claim,
// of an outcome (or a retry back to Pending through apis/retry), of a
// function becoming Ready or losing its registration, bounded messages, and
// the one Update that writes it through runs/status with the object's
// resourceVersion.
package runstatus
