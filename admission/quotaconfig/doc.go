// Package quotaconfig is what k8s.io/apiserver's ResourceQuota admission
// plugin needs to know about kruntimes: which resources it counts
// (count/runs.kruntimes.io, count/runtimes.kruntimes.io), handed to the
// plugin by an admission initializer as kube-apiserver's quota
// configuration is.
package quotaconfig
