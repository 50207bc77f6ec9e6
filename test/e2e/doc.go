// Package e2e holds end-to-end tests that drive a local cluster (real
// kube-apiserver, kube-controller-manager, node agent and kruntimes-apiserver
// behind its APIService) through kubectl and client-go. Run with go test
// ./test/e2e/...; see docs/local-cluster.md.
package e2e
