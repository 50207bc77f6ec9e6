// Package chart renders the Helm chart charts/kruntimes with bin/helm
// (hack/build-helm.sh) for the tests: its own tests lint it, check what every
// rendering promises (verified TLS, restricted Pods, requests, the
// PodDisruptionBudget, values it refuses) and that it renders the objects of
// artifacts/ (kustomize); test/e2e dry-runs its renderings on a cluster.
package chart
