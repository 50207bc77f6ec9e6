//go:build tools

// Package tools records the node commands this module builds, so that go mod
// tidy keeps their dependencies. hack/build-node.sh builds them into bin/.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
