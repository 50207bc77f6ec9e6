// Package invokerouter routes the invocations of runs/invoke: an ownership
// cache fed by informers (Runs from this server's own storage, Runtime Pods
// from the cluster) says which runtimed owns a function Run, and a pool of
// gRPC connections over mutual TLS reaches it. It is the run registry's
// Router; nothing in it reads storage or calls Kubernetes per invocation.
package invokerouter
