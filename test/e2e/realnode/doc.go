// Package realnode tests the local cluster's real node (make run
// NODE=containerd): a Pod from the loopback registry runs under kubelet,
// containerd and runc, and a stop — or a start after a killed run —
// leaves no mount, cgroup, link, iptables rule or network namespace.
// It needs root and hack/build-node.sh: make test runs it as root (CI
// does), KRUNTIMES_E2E_REALNODE=1 runs it alone.
package realnode
