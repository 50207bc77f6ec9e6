package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	controllersoptions "kruntimes.io/kruntimes/controllers/options"
	"kruntimes.io/kruntimes/test/repobin"
)

// Chart mode: kruntimes-apiserver is not a host process but what
// `helm upgrade --install` of charts/kruntimes makes — its Deployment,
// ServiceAccount, RBAC, Secrets, PVC, Service and APIService, and the
// Deployment kruntimes-controllers with its own ServiceAccount — with the
// Deployments' Pods run by the node agent from bin/kruntimes-apiserver and
// bin/kruntimes-controllers.
const (
	// ChartRelease is the Helm release chart mode installs.
	ChartRelease = "kruntimes"
	// ChartImageTag is the apiserver and controllers image tag chart mode
	// installs; the node agent maps any tag of either to bin/.
	ChartImageTag = "local"
	// chartPodLabel selects the chart's apiserver Pods.
	chartPodLabel = "app.kubernetes.io/name=kruntimes-apiserver"
)

// ChartDir is the chart chart mode installs.
func (c *Cluster) ChartDir() string { return filepath.Join(c.cfg.RepoRoot, "charts", "kruntimes") }

// ChartValuesPath is the values file chart mode installs with: only the
// extraArgs the local node needs.
func (c *Cluster) ChartValuesPath() string { return filepath.Join(c.cfg.StateDir, "chart-values.yaml") }

// VolumeRoot is where the local-path provisioner makes each claim's
// directory.
func (c *Cluster) VolumeRoot() string { return filepath.Join(c.cfg.StateDir, "volumes") }

// Helm runs bin/helm against this cluster as cluster-admin, with Helm's
// cache, configuration and data under the state directory, and returns
// what it printed (stdout and stderr), also appended to logs/helm.log.
func (c *Cluster) Helm(ctx context.Context, args ...string) ([]byte, error) {
	home := filepath.Join(c.cfg.StateDir, "helm")
	cmd := exec.CommandContext(ctx, c.binary("helm"), args...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+c.cfg.KubeconfigPath,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	cmd.Dir = c.cfg.RepoRoot
	out, err := cmd.CombinedOutput()
	if f, ferr := os.OpenFile(filepath.Join(c.cfg.StateDir, "logs", "helm.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
		fmt.Fprintf(f, "$ helm %s\n%s\n", strings.Join(args, " "), out)
		f.Close()
	}
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// HelmUpgradeArgs are the arguments of chart mode's helm upgrade --install,
// to which a test may add --set flags. On the real node they are the
// chart's defaults with the tag of the images make images built, as a
// cluster operator installs it; on the process-Pod node they add the
// values file of the local node.
func (c *Cluster) HelmUpgradeArgs() []string {
	if c.cfg.Node == NodeContainerd {
		args := []string{"upgrade", "--install", ChartRelease, c.ChartDir(), "--namespace", KruntimesNamespace}
		if c.realNode != nil && c.realNode.imageTag != "" {
			args = append(args,
				"--set", "image.apiserver.tag="+c.realNode.imageTag,
				"--set", "image.controllers.tag="+c.realNode.imageTag,
			)
		}
		return args
	}
	return []string{"upgrade", "--install", ChartRelease, c.ChartDir(),
		"--namespace", KruntimesNamespace,
		"--values", c.ChartValuesPath(),
		"--set", "image.apiserver.tag=" + ChartImageTag,
		"--set", "image.controllers.tag=" + ChartImageTag,
	}
}

// chartValues are the values chart mode adds to the chart's defaults: how
// a Pod of the local node reaches its own address and kube-apiserver.
func (c *Cluster) chartValues() ([]byte, error) {
	args := []string{
		// Every Pod has a loopback address of its own; binding all of
		// them would make two Pods on 8443 collide.
		"--bind-address=$(POD_IP)",
		// client-go's in-cluster loader reads a fixed path under
		// /var/run/secrets that a node without mount namespaces cannot
		// provide; the node agent writes the same configuration (the
		// Pod's projected token, the cluster CA, KUBERNETES_SERVICE_HOST
		// and PORT) as a kubeconfig and names it in $KUBECONFIG.
		"--kubeconfig=$(KUBECONFIG)",
		"--authentication-kubeconfig=$(KUBECONFIG)",
		"--authorization-kubeconfig=$(KUBECONFIG)",
		// Endpoints this machine's clients reach: kube-apiserver itself.
		"--invoke-endpoint-base=" + c.APIServerURL,
	}
	args = append(args, c.cfg.KruntimesArgs...)
	controllersArgs := []string{
		// As the apiserver's: the Pod's own address, and the Pod's
		// token as a kubeconfig.
		"--health-address=$(POD_IP):10262",
		"--kubeconfig=$(KUBECONFIG)",
	}
	controllersArgs = append(controllersArgs, controllersFlags(c.cfg.KruntimesArgs)...)
	return yaml.Marshal(map[string]any{
		"extraArgs":   args,
		"controllers": map[string]any{"extraArgs": controllersArgs},
	})
}

// controllersFlags are the flags of args that kruntimes-controllers takes
// too (such as --recovery-heartbeat-grace-period): with the controllers
// apart, they are theirs. kruntimes-apiserver takes every one of them.
func controllersFlags(args []string) []string {
	fs := pflag.NewFlagSet("kruntimes-controllers", pflag.ContinueOnError)
	controllersoptions.NewOptions().AddFlags(fs)
	var out []string
	for _, arg := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if fs.Lookup(name) != nil {
			out = append(out, arg)
		}
	}
	return out
}

// installChart creates the namespace (Pod Security restricted, as
// docs/deploy.md asks), installs the chart with Helm and waits for the
// APIService to become Available.
func (c *Cluster) installChart(ctx context.Context, client kubernetes.Interface) error {
	if _, err := os.Stat(c.binary("helm")); err != nil {
		return fmt.Errorf("chart mode needs bin/helm: run make helm")
	}
	if c.cfg.Node == NodeContainerd {
		// containerd pulls the images make images built from the
		// loopback registry; nothing is built here.
		if c.realNode == nil || c.realNode.imageTag == "" {
			return fmt.Errorf("chart mode on the real node installs the images make images builds: none in _output/images, run make images")
		}
	} else {
		c.progress("building kruntimes-apiserver and kruntimes-controllers (%s, %s%s) for the chart's images, tag %s", repobin.APIServer.Package, repobin.Controllers.Package, raceNote(), ChartImageTag)
		if err := repobin.Build(ctx, c.cfg.RepoRoot, repobin.APIServer, repobin.Controllers); err != nil {
			return err
		}
	}
	c.progress("namespace %s (Pod Security restricted)", KruntimesNamespace)
	if err := ensureRestrictedNamespace(ctx, client, KruntimesNamespace); err != nil {
		return err
	}
	if c.cfg.Node == NodeProcess {
		values, err := c.chartValues()
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.ChartValuesPath(), values, 0o644); err != nil {
			return err
		}
	}
	args := c.HelmUpgradeArgs()
	c.progress("helm %s", strings.Join(args, " "))
	started := time.Now()
	if _, err := c.Helm(ctx, args...); err != nil {
		return err
	}
	c.progress("waiting for APIService %s to become Available (the chart's Deployment, Service and PVC)", KruntimesAPIService)
	dyn, err := dynamic.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	if err := WaitAPIServiceAvailable(ctx, dyn, KruntimesAPIService, 3*time.Minute, nil); err != nil {
		return fmt.Errorf("%w (Pods: %s)", err, describeChartPods(ctx, client))
	}
	c.progress("APIService Available %s after helm install (%s)", time.Since(started).Round(100*time.Millisecond), chartPodTimes(ctx, client, started))
	if ip := chartPodIP(ctx, client); ip != "" {
		c.KruntimesURL = "https://" + ip + ":8443"
	}
	return nil
}

// chartPodTimes says when, after helm install started, the apiserver Pod
// was created, its container started and it became Ready (the API's
// timestamps have whole seconds).
func chartPodTimes(ctx context.Context, client kubernetes.Interface, since time.Time) string {
	pods, err := client.CoreV1().Pods(KruntimesNamespace).List(ctx, metav1.ListOptions{LabelSelector: chartPodLabel})
	if err != nil || len(pods.Items) == 0 {
		return "no Pod"
	}
	p := pods.Items[0]
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("+%ds", int(t.Sub(since.Truncate(time.Second)).Seconds()))
	}
	var started, ready time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt.Time
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			ready = cond.LastTransitionTime.Time
		}
	}
	return fmt.Sprintf("Pod created %s, container started %s, Ready %s", at(p.CreationTimestamp.Time), at(started), at(ready))
}

func ensureRestrictedNamespace(ctx context.Context, client kubernetes.Interface, name string) error {
	labels := map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	_, err = client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	return err
}

// chartPodIP is the IP of a running, not deleting apiserver Pod of the chart.
func chartPodIP(ctx context.Context, client kubernetes.Interface) string {
	pods, err := client.CoreV1().Pods(KruntimesNamespace).List(ctx, metav1.ListOptions{LabelSelector: chartPodLabel})
	if err != nil {
		return ""
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return p.Status.PodIP
		}
	}
	return ""
}

// describeChartPods says what the chart's Pods are doing, for an error.
func describeChartPods(ctx context.Context, client kubernetes.Interface) string {
	pods, err := client.CoreV1().Pods(KruntimesNamespace).List(ctx, metav1.ListOptions{LabelSelector: chartPodLabel})
	if err != nil {
		return err.Error()
	}
	if len(pods.Items) == 0 {
		return "none"
	}
	var parts []string
	for _, p := range pods.Items {
		msg := fmt.Sprintf("%s %s ip=%s", p.Name, p.Status.Phase, p.Status.PodIP)
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue && cond.Message != "" {
				msg += fmt.Sprintf(" %s: %s", cond.Type, cond.Message)
			}
		}
		parts = append(parts, msg)
	}
	return strings.Join(parts, "; ")
}
