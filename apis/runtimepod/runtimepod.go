package runtimepod

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Pod identifies one incarnation of a Runtime Pod: the name may be reused by
// a later Pod, the UID never is.
type Pod struct {
	Name, Namespace string
	UID             types.UID
}

// Containers of a Runtime Pod.
const (
	// ContainerRuntime runs the Runtime Server; the user's template provides it.
	ContainerRuntime = "runtime"
	// ContainerRuntimed runs the runtimed sidecar; kruntimes adds it.
	ContainerRuntimed = "runtimed"
)

// Shared volumes and paths.
const (
	// VolumeWorkspace holds one directory per Run, /workspace/<run UID>.
	VolumeWorkspace = "workspace"
	// WorkspacePath is where VolumeWorkspace is mounted in both containers.
	WorkspacePath = "/workspace"
	// VolumeSocket holds the Runtime Server's unix socket.
	VolumeSocket = "kruntimes-run"
	// SocketDir is where VolumeSocket is mounted in both containers.
	SocketDir = "/run/kruntimes"
	// RuntimeSocket is the Runtime Server's listen address; it never listens
	// on the network.
	RuntimeSocket = "unix://" + SocketDir + "/runtime.sock"
)

// Environment of the runtimed container, from the downward API.
const (
	EnvPodName      = "POD_NAME"
	EnvPodNamespace = "POD_NAMESPACE"
	EnvPodUID       = "POD_UID"
	EnvPodIP        = "POD_IP"
	// EnvRuntime names the Runtime of the Pod, from its kruntimes.io/runtime
	// label.
	EnvRuntime = "RUNTIME_NAME"
)

// EnvKruntimesAPICA, in runtimed's container, is the PEM bundle that
// verifies kruntimes-apiserver's serving certificate at runtimed's
// --kruntimes-api-server: the runtime controller sets it with the flag. A
// CA is public, and in the Pod spec a change of it rolls the Pods.
const EnvKruntimesAPICA = "KRUNTIMES_API_CA"

// EnvCapacity, in the Runtime Server's container, is the Runtime's
// capacity.runs: how many Runs the Pod holds at once. The built-in Python
// Runtime Server keeps a warm worker ready for each free slot (up to a
// bound), so the functions a rollout moves onto a new Pod all at once find
// their interpreters started.
const EnvCapacity = "KRUNTIMES_CAPACITY"

// The invoke hop's TLS in the runtimed container: a Secret of type
// kubernetes.io/tls per Runtime, holding runtimed's serving pair and the
// kruntimes CA (ca.crt) that signs it and the apiserver's client certificate.
const (
	VolumeRuntimedTLS = "runtimed-tls"
	RuntimedTLSDir    = "/etc/kruntimes/runtimed-tls"
	RuntimedTLSCert   = RuntimedTLSDir + "/tls.crt"
	RuntimedTLSKey    = RuntimedTLSDir + "/tls.key"
	RuntimedTLSCA     = RuntimedTLSDir + "/ca.crt"
)

// runtimed's Kubernetes credentials: a projected, Pod-bound ServiceAccount
// token, mounted into the runtimed container alone where client-go looks for
// it. The Pod does not automount one, so no other container (the Runtime
// Server runs user code) gets any.
const (
	VolumeRuntimedAPIAccess = "runtimed-api-access"
	ServiceAccountDir       = "/var/run/secrets/kubernetes.io/serviceaccount"
	// TokenExpirationSeconds is the projected token's lifetime; the kubelet
	// renews it at 80%.
	TokenExpirationSeconds = 3607
)

// Ports and the heartbeat of runtimed.
const (
	// RuntimedHealthPort serves /healthz and /readyz over plain HTTP.
	RuntimedHealthPort = 8080
	// RuntimedMetricsPort serves /metrics over HTTPS to a scraper's
	// client certificate (invocation.MetricsClientCommonName).
	RuntimedMetricsPort = 9444
	// RuntimedInvokePort serves the apiserver's invocations (gRPC, mutual
	// TLS) on the Pod IP.
	RuntimedInvokePort = 9443
	// HeartbeatLeaseDuration is how long a runtimed heartbeat stays fresh:
	// the scheduler ignores a Pod whose Lease was not renewed within it.
	HeartbeatLeaseDuration = 10 * time.Second
	// HeartbeatRenewInterval is how often runtimed renews its Lease.
	HeartbeatRenewInterval = 3 * time.Second
	// ShutdownDrain is how long, on SIGTERM, runtimed lets a function's
	// invocation in flight finish before it gives the function back for
	// relocation; ShutdownTimeout bounds the whole relocation. Both shrink
	// with a short termination grace (ShutdownBounds).
	ShutdownDrain   = 5 * time.Second
	ShutdownTimeout = 15 * time.Second
)

// ShutdownBounds returns runtimed's drain and relocation timeout for a Pod
// whose termination grace is grace (nil: Kubernetes' default of 30 s):
// the defaults, or less when half the grace is shorter, so that the
// relocation, the invoke server's own stop and the exit fit in the grace.
func ShutdownBounds(grace *int64) (drain, timeout time.Duration) {
	g := time.Duration(30) * time.Second
	if grace != nil {
		g = time.Duration(*grace) * time.Second
	}
	timeout = min(ShutdownTimeout, g/2)
	drain = min(ShutdownDrain, (timeout / 3).Truncate(100*time.Millisecond))
	return drain, timeout
}

// SocketPath returns the file of a Runtime Server address such as
// RuntimeSocket. Only unix:// sockets at absolute paths are accepted: user
// code must never be reachable from the network, and gRPC dials unix://
// addresses by absolute path. The error completes a sentence that begins
// with the flag's name.
func SocketPath(address string) (string, error) {
	path, ok := strings.CutPrefix(address, "unix://")
	if !ok || !filepath.IsAbs(path) {
		return "", fmt.Errorf("must be unix:///absolute/path.sock, got %q: the Runtime Server never listens on the network", address)
	}
	return path, nil
}

// LeaseName is the name of the heartbeat Lease of a Runtime Pod, in the
// Pod's namespace; its holderIdentity is the Pod's UID.
func LeaseName(podName string) string { return podName }

// DeploymentName is the Deployment that holds the Pods of a Runtime.
func DeploymentName(runtime string) string { return "runtime-" + runtime }

// RuntimedTLSSecretName is the Secret holding the invoke TLS of the Pods of
// a Runtime.
func RuntimedTLSSecretName(runtime string) string { return "runtime-" + runtime + "-tls" }

// ServiceAccountName is the ServiceAccount (and Role, RoleBinding) of the
// Pods of a Runtime: runtimed's least privilege.
func ServiceAccountName(runtime string) string { return serviceAccountPrefix + runtime }

// serviceAccountPrefix begins the name of every Runtime's ServiceAccount.
const serviceAccountPrefix = "runtime-"

// RuntimeOfServiceAccount is the inverse of ServiceAccountName: ok is false
// for a ServiceAccount that no Runtime names. The apiserver and the Lease
// admission policy narrow every ServiceAccount of this form to its Pod.
func RuntimeOfServiceAccount(name string) (runtime string, ok bool) {
	runtime, ok = strings.CutPrefix(name, serviceAccountPrefix)
	return runtime, ok && runtime != ""
}

// HeartbeatFresh reports whether lease was renewed within its duration at
// now: the scheduler binds only to Pods whose heartbeat is fresh, and
// runtimed reports itself not ready when its own is not.
func HeartbeatFresh(lease *coordinationv1.Lease, now time.Time) bool {
	expiry, ok := HeartbeatExpiry(lease)
	return ok && expiry.After(now)
}

// HeartbeatExpiry is when lease stops being fresh without a renewal: its
// renewTime plus its duration (HeartbeatLeaseDuration when it names none);
// false when it was never renewed.
func HeartbeatExpiry(lease *coordinationv1.Lease) (time.Time, bool) {
	if lease == nil || lease.Spec.RenewTime == nil {
		return time.Time{}, false
	}
	d := HeartbeatLeaseDuration
	if s := lease.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		d = time.Duration(*s) * time.Second
	}
	return lease.Spec.RenewTime.Add(d), true
}
