// Package functions is runtimed's function controller: it claims the
// function Runs assigned to its Pod, registers them on the local Runtime
// Server, makes them Ready with their endpoint, watches every registration's
// health and idle clock with one call per tick, enforces spec.timeout and
// idleTimeoutSeconds, honours cancellation and deletion with the
// registration-cleanup finalizer, and re-adopts live registrations after a
// restart. Its Admit gate tells the invoke path which registration, if any,
// may serve a Run.
package functions
