// Package logscan finds the reports the Go runtime writes when a program
// races or crashes — "WARNING: DATA RACE", "panic:" and "fatal error:" with
// their goroutine traces — in the logs of the processes a test suite ran, so
// that a race or crash in a component fails the suite instead of scrolling
// past in a log nobody reads.
package logscan
