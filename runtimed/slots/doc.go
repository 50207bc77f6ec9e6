// Package slots is runtimed's one count of its Pod's capacity: task
// executions and function registrations both hold a slot from claim until
// their Pod-local state is gone, and nothing else decides whether one more
// Run fits.
package slots
