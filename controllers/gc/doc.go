// Package gc deletes terminal Runs once their spec.ttlSecondsAfterFinished
// has passed, in the manner of Kubernetes' TTL-after-finished controller for
// Jobs: an informer, a delaying workqueue, and a fresh read before deleting.
package gc
