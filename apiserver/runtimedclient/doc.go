// Package runtimedclient is how kruntimes-apiserver reaches a runtimed, as
// pkg/kubelet/client is how kube-apiserver reaches a kubelet: invocations
// and log follows in, API errors and runlog chunks out, the follows of one
// attempt sharing one stream (logfanout). The registry speaks
// HTTP and API objects; runtimed's gRPC protocol stays in here.
package runtimedclient
