// Package health serves runtimed's /healthz, /readyz and /metrics on the
// health port. /readyz runs named checks (informer synced, heartbeat fresh,
// Runtime Server serving) so a Pod takes Runs only when all of them pass;
// /healthz fails when a loop is wedged (Loop) or the Run informer stopped,
// so the kubelet restarts runtimed.
package health
