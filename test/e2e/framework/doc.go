// Package framework starts one local cluster (test/localcluster) per go test
// invocation for the e2e suite, and gives tests the cluster's clients and a
// kubectl built from Kubernetes v1.37.2. It skips the suite cleanly when the
// Kubernetes binaries are not built, unless KRUNTIMES_E2E_REQUIRE=1, and fails
// it when any process the cluster ran logged a data race or a crash.
package framework
