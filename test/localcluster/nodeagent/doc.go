// Package nodeagent is a kubelet for a local development cluster: it registers
// a Node, keeps its Lease fresh and runs every Pod bound to it as local
// processes, each Pod on its own loopback address, with truthful Pod status,
// probes, restarts, service-account tokens and a kubelet API for kubectl logs.
package nodeagent
