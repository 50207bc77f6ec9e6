// Package logfollow is the loop of a follow of runs/log: it tries to
// stream, and between tries waits for the Run's route to change, as the
// invoke router's ownership cache signals it, rather than polling the Run.
package logfollow
