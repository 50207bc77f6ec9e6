// Package runtimepodpermission is the RuntimePodPermission admission plugin:
// creating a Runtime, or changing its spec, is creating Pods from its
// template, so it requires that the requesting user may create Pods in the
// namespace, as RBAC's escalation check requires holding what a Role grants.
package runtimepodpermission
