// Package metrics defines runtimed's Prometheus metrics,
// kruntimes_runtimed_*, registered in the component-base legacy registry.
// Labels are bounded: phases, reasons chosen by kruntimes, results; never
// names chosen by users.
package metrics
