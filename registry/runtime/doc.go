// Package runtime is the registry of Runtimes, the pools of warm Runtime
// Pods: strategies, the kubectl table and the REST storage for runtimes and
// runtimes/status.
package runtime
