// Package runtime reconciles each Runtime into its pool of Runtime Pods: a
// Deployment runtime-<name> running the user's runtime container beside the
// runtimed sidecar, and the ServiceAccount, Role and RoleBinding that give
// runtimed least privilege; it reports the pool's readiness in the Runtime's
// status.
package runtime
