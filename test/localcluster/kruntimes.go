package localcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/proto/pki"
	"kruntimes.io/kruntimes/test/repobin"
)

// Names the kruntimes-apiserver is registered under; artifacts/ uses the same.
const (
	KruntimesNamespace   = "kruntimes-system"
	KruntimesService     = "kruntimes-apiserver"
	KruntimesAPIService  = "v1alpha1.kruntimes.io"
	kruntimesGroup       = "kruntimes.io"
	kruntimesVersion     = "v1alpha1"
	kruntimesTokenExpiry = 24 * time.Hour
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// hostedControllersBinding binds the controllers' ClusterRole; artifacts/
// binds it to kruntimes-controllers' ServiceAccount, the local cluster to the
// apiserver's, which hosts them.
const hostedControllersBinding = "kruntimes-controllers"

// artifactKinds are the kinds applied from artifacts/ for the local cluster.
// The apiserver's Deployment and Service are not: the apiserver runs as a
// local process behind an ExternalName Service instead.
var artifactKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	// runtimed's Lease restriction (runtimed-lease-policy.yaml).
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// startKruntimes builds kruntimes-apiserver, runs it as its ServiceAccount
// with delegated authn/authz, and registers it through a real APIService.
func (c *Cluster) startKruntimes(ctx context.Context, logDir string, client kubernetes.Interface) error {
	if c.cfg.Kruntimes == KruntimesDisabled {
		c.KruntimesSkipReason = "disabled"
		c.progress("kruntimes-apiserver: disabled")
		return nil
	}
	if c.chart() {
		if err := c.installChart(ctx, client); err != nil {
			return err
		}
		c.KruntimesRunning = true
		return nil
	}
	c.progress("building kruntimes-apiserver (%s%s)", repobin.APIServer.Package, raceNote())
	if err := repobin.Build(ctx, c.cfg.RepoRoot, repobin.APIServer); err != nil {
		return err
	}
	if err := c.runKruntimes(ctx, logDir, client); err != nil {
		return err
	}
	c.KruntimesRunning = true
	return nil
}

func (c *Cluster) runKruntimes(ctx context.Context, logDir string, client kubernetes.Interface) error {
	dir := filepath.Join(c.cfg.StateDir, "kruntimes-apiserver")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return err
	}
	c.progress("kruntimes-apiserver: namespace, ServiceAccount and RBAC (artifacts/)")
	if err := c.applyArtifacts(ctx, client); err != nil {
		return err
	}

	// Serving pair signed by the cluster CA, valid for the name the
	// aggregator dials (<service>.<namespace>.svc) and for loopback.
	ca, err := c.loadClusterCA()
	if err != nil {
		return err
	}
	svcName := KruntimesService + "." + KruntimesNamespace + ".svc"
	servingCert, servingKey := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if err := issueFiles(ca, servingCert, servingKey, pki.Leaf{
		CommonName: svcName,
		DNSNames:   []string{svcName, svcName + ".cluster.local", KruntimesService + "." + KruntimesNamespace, "localhost"},
		IPs:        []net.IP{net.ParseIP("127.0.0.1")},
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return err
	}

	// Run as the ServiceAccount so the RBAC from artifacts/ is what is tested.
	tr, err := client.CoreV1().ServiceAccounts(KruntimesNamespace).CreateToken(ctx, KruntimesService, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(kruntimesTokenExpiry.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", KruntimesNamespace, KruntimesService, err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	saConfig := &rest.Config{Host: c.APIServerURL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: c.pki.clusterCA()}}
	if err := writeKubeconfig(kubeconfig, saConfig, "kruntimes-local", "system:serviceaccount:"+KruntimesNamespace+":"+KruntimesService); err != nil {
		return err
	}

	invokeCA, err := c.ensureInvokePKI()
	if err != nil {
		return err
	}

	n := c.cfg.KruntimesReplicas
	ports, err := freePorts(n)
	if err != nil {
		return err
	}
	storage := []string{"--storage-backend=embedded", "--storage-path=" + filepath.Join(dir, "data")}
	where := "embedded storage in " + filepath.Join(dir, "data")
	switch c.cfg.KruntimesStorage {
	case "", "embedded":
	case "etcd3":
		storage = []string{"--storage-backend=etcd3", "--etcd-servers=" + c.EtcdURL, "--etcd-prefix=/kruntimes"}
		where = "etcd3 storage in " + c.EtcdURL + " under /kruntimes"
	default:
		return fmt.Errorf("kruntimes storage %q: want embedded or etcd3", c.cfg.KruntimesStorage)
	}
	caPEM, err := os.ReadFile(c.pki.clusterCA())
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	backends := make([]string, n)
	for i, port := range ports {
		backends[i] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	// Direct callers, and runtimed, reach the first replica, or with more
	// than one the Service front, which is up before them.
	port := ports[0]
	c.KruntimesURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	if n > 1 {
		// The front lives as long as the cluster, not this start call.
		frontCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		front, err := startServiceFront(frontCtx, "127.0.0.1:0", backends, tlsWithRoots(pool))
		if err != nil {
			stop()
			return err
		}
		c.front, c.stopFront = front, stop
		_, frontPort, _ := net.SplitHostPort(front.Addr())
		port, _ = strconv.Atoi(frontPort)
		c.KruntimesURL = "https://" + front.Addr()
		c.progress("Service front of %d kruntimes-apiserver replicas on 127.0.0.1:%d (each new connection to the next ready one)", n, port)
	}
	for i, port := range ports {
		name, debugSocket, auditLog := repobin.APIServer.Name, filepath.Join(dir, "debug.sock"), c.KruntimesAuditLogPath()
		if i > 0 {
			name, debugSocket = fmt.Sprintf("%s-%d", name, i), filepath.Join(dir, fmt.Sprintf("debug-%d.sock", i))
			auditLog = filepath.Join(filepath.Dir(auditLog), fmt.Sprintf("kruntimes-%d-audit.log", i))
		}
		c.progress("%s on https://127.0.0.1:%d (%s)", name, port, where)
		args := []string{
			"--secure-port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--cert-dir=" + filepath.Join(dir, "certs"),
			"--tls-cert-file=" + servingCert,
			"--tls-private-key-file=" + servingKey,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--kubeconfig=" + kubeconfig,
			// The invoke hop: this server's client pair for runtimed, and the
			// CA with which the runtime controller issues each Runtime's
			// runtimed serving pair.
			"--runtimed-ca-file=" + invokeCA.cert,
			"--runtimed-ca-key-file=" + invokeCA.key,
			"--runtimed-client-cert-file=" + invokeCA.clientCert,
			"--runtimed-client-key-file=" + invokeCA.clientKey,
			// Endpoints this machine's clients reach: kube-apiserver itself.
			"--invoke-endpoint-base=" + c.APIServerURL,
			// pprof without authentication, on a socket only this machine's
			// root reaches: for profiling under the benchmarks.
			"--debug-socket-path=" + debugSocket,
			// Its own audit log, with kube-apiserver's policy: every
			// invocation, through aggregation or direct, tagged with its
			// entry point (kruntimes.io/entry-point). One file per replica.
			"--audit-policy-file=" + c.auditPolicyPath(),
			"--audit-log-path=" + auditLog,
			"--audit-log-maxsize=100",
			"--audit-log-maxbackup=1",
		}
		if !c.cfg.RuntimedThroughAggregation && c.cfg.Node != NodeContainerd {
			// runtimed reaches this API as a Pod reaches the Service. A
			// real node's Pods cannot reach this loopback address: there
			// runtimed goes through kube-apiserver's aggregation.
			args = append(args, "--runtimed-kruntimes-api-server="+c.KruntimesURL, "--runtimed-kruntimes-api-ca-file="+c.pki.clusterCA())
		}
		args = append(args, storage...)
		args = append(args, c.cfg.KruntimesArgs...)
		replica := replicaStart{logDir: logDir, name: name, args: args, readyz: fmt.Sprintf("https://127.0.0.1:%d/readyz", port), tls: tlsWithRoots(pool)}
		proc, err := c.startReplica(ctx, replica)
		if err != nil {
			return err
		}
		c.components = append(c.components, proc)
		c.kruntimesUp = append(c.kruntimesUp, proc)
		c.kruntimesStarts = append(c.kruntimesStarts, replica)
	}
	proc := c.kruntimesUp[0]
	if n > 1 {
		// Available as long as any replica runs.
		proc = nil
	}

	c.progress("registering APIService %s (ExternalName Service %s/%s → localhost:%d)", KruntimesAPIService, KruntimesNamespace, KruntimesService, port)
	if err := ensureExternalNameService(ctx, client, port); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	if err := ensureAPIService(ctx, dyn, port, caPEM); err != nil {
		return err
	}
	c.progress("waiting for APIService %s to become Available", KruntimesAPIService)
	alive := func() error { return nil }
	if proc != nil {
		alive = proc.running
	}
	return WaitAPIServiceAvailable(ctx, dyn, KruntimesAPIService, 3*time.Minute, alive)
}

// KruntimesReplicaPIDs returns the process ID of each kruntimes-apiserver
// replica still running, in start order (0 for one that exited), for tests
// that kill one.
func (c *Cluster) KruntimesReplicaPIDs() []int {
	pids := make([]int, len(c.kruntimesUp))
	for i, comp := range c.kruntimesUp {
		if comp.running() == nil {
			pids[i] = comp.cmd.Process.Pid
		}
	}
	return pids
}

// replicaStart is how one kruntimes-apiserver replica is started, kept to
// start it again.
type replicaStart struct {
	logDir, name string
	args         []string
	readyz       string
	tls          *tls.Config
}

// startReplica starts a replica and waits until it is ready.
func (c *Cluster) startReplica(ctx context.Context, r replicaStart) (*component, error) {
	proc, err := startComponent(ctx, r.logDir, r.name, c.binary(repobin.APIServer.Name), r.args...)
	if err != nil {
		return nil, err
	}
	if err := c.waitHTTP(ctx, proc, r.readyz, r.tls); err != nil {
		proc.stop(ctx)
		return nil, err
	}
	return proc, nil
}

// RestartKruntimesReplica stops replica i as a rolling update does —
// SIGTERM, then SIGKILL after the grace period — and starts it again with
// the same flags, returning once it is ready. Not safe to call
// concurrently with Stop or Err.
func (c *Cluster) RestartKruntimesReplica(ctx context.Context, i int) error {
	return c.WithKruntimesReplicaStopped(ctx, i, nil)
}

// WithKruntimesReplicaStopped stops replica i as RestartKruntimesReplica
// does, calls stopped (when not nil) while it is down — its embedded
// storage file is then unlocked, for a test to look into
// (KruntimesDataDir) — and starts it again with the same flags, returning
// once it is ready. It returns stopped's error, else the start's. Not safe
// to call concurrently with Stop or Err.
func (c *Cluster) WithKruntimesReplicaStopped(ctx context.Context, i int, stopped func() error) error {
	if i < 0 || i >= len(c.kruntimesUp) {
		return fmt.Errorf("no kruntimes-apiserver replica %d: the cluster runs %d", i, len(c.kruntimesUp))
	}
	old := c.kruntimesUp[i]
	old.stop(ctx)
	var stoppedErr error
	if stopped != nil {
		stoppedErr = stopped()
	}
	proc, err := c.startReplica(ctx, c.kruntimesStarts[i])
	if err != nil {
		return errors.Join(stoppedErr, err)
	}
	c.kruntimesUp[i] = proc
	c.components[slices.Index(c.components, old)] = proc
	return stoppedErr
}

// KruntimesDataDir is the directory of kruntimes-apiserver's embedded
// storage (--storage-path), or "" when it runs on etcd3 or from the chart.
// The server locks the file while it runs.
func (c *Cluster) KruntimesDataDir() string {
	if len(c.kruntimesStarts) == 0 || (c.cfg.KruntimesStorage != "" && c.cfg.KruntimesStorage != "embedded") {
		return ""
	}
	return filepath.Join(c.cfg.StateDir, "kruntimes-apiserver", "data")
}

// KruntimesReplicaLogs returns the log file of each kruntimes-apiserver
// replica, in start order.
func (c *Cluster) KruntimesReplicaLogs() []string {
	logs := make([]string, len(c.kruntimesUp))
	for i, comp := range c.kruntimesUp {
		logs[i] = comp.logPath
	}
	return logs
}

func (c *Cluster) loadClusterCA() (*pki.CA, error) {
	certPEM, err := os.ReadFile(c.pki.clusterCA())
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(c.pki.path("ca.key"))
	if err != nil {
		return nil, err
	}
	return pki.LoadCA(certPEM, keyPEM)
}

// applyArtifacts creates the namespace, ServiceAccount, RBAC and admission
// policy objects from artifacts/, so the local cluster tests the manifests
// users apply.
func (c *Cluster) applyArtifacts(ctx context.Context, client kubernetes.Interface) error {
	objs, err := readArtifacts(filepath.Join(c.cfg.RepoRoot, "artifacts"))
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		return fmt.Errorf("no Namespace, ServiceAccount or RBAC manifests under %s", filepath.Join(c.cfg.RepoRoot, "artifacts"))
	}
	for _, obj := range objs {
		if obj.GetKind() == "ClusterRoleBinding" && obj.GetName() == hostedControllersBinding {
			// The host-process apiserver hosts the controllers (the
			// chart's controllers.hosted): their rights are its.
			subject := map[string]any{"kind": "ServiceAccount", "name": KruntimesService, "namespace": KruntimesNamespace}
			if err := unstructured.SetNestedSlice(obj.Object, []any{subject}, "subjects"); err != nil {
				return err
			}
		}
	}
	dyn, err := dynamic.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	// Namespaces first so namespaced objects find theirs.
	for _, pass := range []bool{true, false} {
		for _, obj := range objs {
			if (obj.GetKind() == "Namespace") != pass {
				continue
			}
			if err := applyObject(ctx, dyn, mapper, obj); err != nil {
				return err
			}
		}
	}
	return nil
}

func applyObject(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("mapping %s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	if ns := obj.GetNamespace(); ns != "" {
		ri = dyn.Resource(mapping.Resource).Namespace(ns)
	}
	_, err = ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "localcluster", Force: true})
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return nil
}

// readArtifacts reads every YAML document under dir whose kind is in
// artifactKinds.
func readArtifacts(dir string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return filepath.SkipAll
		}
		if err != nil {
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("%s: %w", path, err)
			}
			if artifactKinds[obj.GetKind()] {
				objs = append(objs, obj)
			}
		}
	})
	return objs, err
}

func ensureExternalNameService(ctx context.Context, client kubernetes.Interface, port int) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: KruntimesService, Namespace: KruntimesNamespace},
		Spec: corev1.ServiceSpec{
			// The aggregator resolves an ExternalName Service to
			// https://<externalName>:<APIService port>; EndpointSlices
			// would reject a loopback address.
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port), Protocol: corev1.ProtocolTCP}},
		},
	}
	services := client.CoreV1().Services(KruntimesNamespace)
	existing, err := services.Get(ctx, svc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = services.Create(ctx, svc, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	case existing.Spec.Type != corev1.ServiceTypeExternalName:
		if err := services.Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		_, err = services.Create(ctx, svc, metav1.CreateOptions{})
		return err
	}
	existing.Spec = svc.Spec
	_, err = services.Update(ctx, existing, metav1.UpdateOptions{})
	return err
}

func ensureAPIService(ctx context.Context, dyn dynamic.Interface, port int, caBundle []byte) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": KruntimesAPIService},
		"spec": map[string]any{
			"group":                kruntimesGroup,
			"version":              kruntimesVersion,
			"groupPriorityMinimum": int64(1000),
			"versionPriority":      int64(15),
			"service": map[string]any{
				"namespace": KruntimesNamespace,
				"name":      KruntimesService,
				"port":      int64(port),
			},
		},
	}}
	// []byte fields travel as base64 strings in JSON.
	if err := unstructured.SetNestedField(obj.Object, encodeBase64(caBundle), "spec", "caBundle"); err != nil {
		return err
	}
	_, err := dyn.Resource(apiServiceGVR).Apply(ctx, KruntimesAPIService, obj, metav1.ApplyOptions{FieldManager: "localcluster", Force: true})
	return err
}

// WaitAPIServiceAvailable polls until the APIService's Available condition
// is True. alive, when set, aborts the wait if it returns an error.
func WaitAPIServiceAvailable(ctx context.Context, dyn dynamic.Interface, name string, timeout time.Duration, alive func() error) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if alive != nil {
			if err := alive(); err != nil {
				return false, err
			}
		}
		obj, err := dyn.Resource(apiServiceGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not Available (%s): %w", name, last, err)
	}
	return nil
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// ImageCommands are the binaries container images map to on the local node
// (see nodeagent.ImageBinaries) that this repository builds.
var ImageCommands = []repobin.Command{
	{Name: "runtimed", Package: "./cmd/runtimed"},
	{Name: "kruntimes-runtime", Package: "./cmd/kruntimes-runtime"},
	// Not an image of its own: it ships in the kruntimes-runtime image, and
	// the Runtime Server finds it beside its binary.
	// Every task and sandbox command runs under the reaper; its own tests
	// (runtimes/process) run race-built.
	{Name: "kruntimes-reaper", Package: "./cmd/kruntimes-reaper", NoRace: true},
	{Name: "krt", Package: "./cmd/krt"},
	{Name: "e2e-testserver", Package: "./test/e2e/testserver"},
}

func raceNote() string {
	if repobin.RaceEnabled {
		return ", -race like this binary"
	}
	return ""
}

// invokePKI are the files of the invoke hop's TLS: the kruntimes CA and
// kruntimes-apiserver's client pair for runtimed.
type invokePKI struct {
	cert, key, clientCert, clientKey string
}

// ensureInvokePKI makes the kruntimes CA and the apiserver's client pair
// in dir, once: a restarted cluster keeps them, and with them the Secrets
// its Runtimes already have.
func (c *Cluster) ensureInvokePKI() (invokePKI, error) {
	var p invokePKI
	p.cert, p.key, p.clientCert, p.clientKey = c.InvokePKIFiles()
	if _, err := os.Stat(p.clientKey); err == nil {
		return p, nil
	}
	ca, err := pki.NewCA(pki.InvokeCACommonName, certValidity)
	if err != nil {
		return p, err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return p, err
	}
	cert, key, err := ca.IssueClient(certValidity)
	if err != nil {
		return p, err
	}
	for path, data := range map[string][]byte{p.cert: ca.CertPEM, p.key: caKey, p.clientCert: cert, p.clientKey: key} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return p, err
		}
	}
	return p, nil
}

// InvokePKIFiles returns the paths of the invoke hop's CA and
// kruntimes-apiserver's client pair; tests rotate them on disk.
func (c *Cluster) InvokePKIFiles() (caCert, caKey, clientCert, clientKey string) {
	dir := filepath.Join(c.cfg.StateDir, "kruntimes-apiserver")
	return filepath.Join(dir, "invoke-ca.crt"), filepath.Join(dir, "invoke-ca.key"),
		filepath.Join(dir, "invoke-client.crt"), filepath.Join(dir, "invoke-client.key")
}
