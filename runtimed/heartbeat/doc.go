// Package heartbeat keeps the runtimed heartbeat: one coordination.k8s.io/v1
// Lease per Runtime Pod, held by the Pod's UID and owned by the Pod, renewed
// every runtimepod.HeartbeatRenewInterval. The scheduler binds Runs only to
// Pods whose Lease is fresh.
package heartbeat
