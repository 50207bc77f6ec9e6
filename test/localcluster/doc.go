// Package localcluster runs a complete Kubernetes control plane on this
// machine from binaries built by hack/build-kube.sh: etcd, kube-apiserver with
// aggregation configured as in a real cluster, kube-controller-manager, a local
// node agent, and (when it builds) kruntimes-apiserver behind a real APIService.
// Everything binds to loopback and writes under one state directory.
package localcluster
