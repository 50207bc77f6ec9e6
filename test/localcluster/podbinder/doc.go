// Package podbinder stands in for kube-scheduler on a one-node local cluster:
// it binds every unscheduled Pod that asks for the default scheduler to the
// local node, through the pods/binding subresource as kube-scheduler does.
package podbinder
