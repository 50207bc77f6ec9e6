// Package runtimepodpermission is the RuntimePodPermission admission plugin:
// creating or updating a Runtime is creating Pods from its template, so it
// requires that the requesting user may create Pods in the namespace, as
// RBAC's escalation check requires holding what a Role grants.
package runtimepodpermission
