// Package realnode prepares and tears down the local cluster's real node
// (make run NODE=containerd): the configuration files of containerd, the
// CNI bridge, kubelet and kube-proxy, written from typed structs; the
// cluster's own bridge; the loopback registry Pods pull from; and the
// cleanup that removes every container, network namespace, link, iptables
// rule, mount and cgroup a run left, also after a killed run.
package realnode
