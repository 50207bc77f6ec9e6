package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Environment variables every container gets, beyond those it declares.
const (
	// EnvPodDir is the Pod's directory on this machine.
	EnvPodDir = "KRUNTIMES_POD_DIR"
	// EnvMounts lists "mountPath=hostPath" pairs, separated by ":", so a
	// binary can find where a volumeMount really lives.
	EnvMounts = "KRUNTIMES_MOUNTS"
	// EnvVolumePrefix + VOLUME_NAME (upper case, "-" → "_") is the host path
	// of each mounted volume.
	EnvVolumePrefix = "KRUNTIMES_VOLUME_"
	// EnvServiceAccountDir is the host path of the service-account volume
	// (token, ca.crt, namespace) when one is mounted.
	EnvServiceAccountDir = "KRUNTIMES_SERVICEACCOUNT_DIR"
	// serviceAccountMountPath is where the ServiceAccount admission plugin
	// mounts the API access volume.
	serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// environment builds the container's environment: a minimal host base, the
// Kubernetes service variables, downward-API values, the volume locations and
// the variables the container declares, in that order of precedence. It also
// returns the translator of the container's mountPaths.
func (c *containerRunner) environment(ctx context.Context, workDir string) (map[string]string, *pathTranslator, error) {
	p := c.pod
	pod := p.currentPod()
	cfg := p.agent.cfg
	tmp := filepath.Join(p.dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	podIP := p.podIP
	vols := p.volumes
	p.mu.Unlock()
	env := map[string]string{
		"PATH":                      os.Getenv("PATH"),
		"HOME":                      workDir,
		"TMPDIR":                    tmp,
		"HOSTNAME":                  pod.Name,
		"KUBERNETES_SERVICE_HOST":   cfg.APIServerHost,
		"KUBERNETES_SERVICE_PORT":   strconv.Itoa(cfg.APIServerPort),
		"KUBERNETES_PORT":           fmt.Sprintf("tcp://%s:%d", cfg.APIServerHost, cfg.APIServerPort),
		"POD_NAME":                  pod.Name,
		"POD_NAMESPACE":             pod.Namespace,
		"POD_UID":                   string(pod.UID),
		"POD_IP":                    podIP,
		"NODE_NAME":                 pod.Spec.NodeName,
		EnvPodDir:                   p.dir,
		"KRUNTIMES_LOCAL_NODE":      "true",
		"KRUNTIMES_KUBERNETES_CA":   cfg.APIServerCA,
		"KRUNTIMES_SERVICE_ACCOUNT": pod.Spec.ServiceAccountName,
	}
	var mounts []string
	for _, m := range c.spec.VolumeMounts {
		host, ok := vols.hostPath(m.Name)
		if !ok {
			return nil, nil, fmt.Errorf("volumeMount %q refers to an unknown volume", m.Name)
		}
		if m.SubPath != "" {
			host = filepath.Join(host, m.SubPath)
		}
		env[EnvVolumePrefix+envName(m.Name)] = host
		mounts = append(mounts, m.MountPath+"="+host)
		if m.MountPath == serviceAccountMountPath {
			env[EnvServiceAccountDir] = host
		}
	}
	sort.Strings(mounts)
	env[EnvMounts] = strings.Join(mounts, ":")
	if saDir, ok := env[EnvServiceAccountDir]; ok {
		kubeconfig := filepath.Join(p.dir, "kubeconfig")
		server := "https://" + net.JoinHostPort(cfg.APIServerHost, strconv.Itoa(cfg.APIServerPort))
		if err := writeInClusterKubeconfig(kubeconfig, server, saDir); err != nil {
			return nil, nil, err
		}
		env["KUBECONFIG"] = kubeconfig
	}
	paths := c.paths(vols)

	client := p.agent.client.CoreV1()
	for _, from := range c.spec.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := client.ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, nil, err
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, err := client.Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, nil, err
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		for k, v := range data {
			env[from.Prefix+k] = v
		}
	}
	for _, e := range c.spec.Env {
		if e.ValueFrom == nil {
			// mountPaths first: a $(VAR) value is already a host path,
			// which a mountPath such as /tmp must not rewrite again.
			env[e.Name] = expand(paths.translate(e.Value), env)
			continue
		}
		v, err := c.envValue(ctx, pod, podIP, e.ValueFrom)
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		env[e.Name] = v
	}
	return env, paths, nil
}

func (c *containerRunner) envValue(ctx context.Context, pod *corev1.Pod, podIP string, src *corev1.EnvVarSource) (string, error) {
	client := c.pod.agent.client.CoreV1()
	switch {
	case src.FieldRef != nil:
		return fieldValue(pod, podIP, src.FieldRef.FieldPath)
	case src.ConfigMapKeyRef != nil:
		cm, err := client.ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data[src.ConfigMapKeyRef.Key], nil
	case src.SecretKeyRef != nil:
		s, err := client.Secrets(pod.Namespace).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return string(s.Data[src.SecretKeyRef.Key]), nil
	case src.ResourceFieldRef != nil:
		return "0", nil
	}
	return "", nil
}

// fieldValue resolves a downward-API field path.
func fieldValue(pod *corev1.Pod, podIP, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	case "status.hostIP", "status.hostIPs":
		return "127.0.0.1", nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")], nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")], nil
	}
	return "", fmt.Errorf("unsupported downward-API field %q", path)
}

// paths translates this container's mountPaths to their host directories.
func (c *containerRunner) paths(vols *podVolumes) *pathTranslator {
	mounts := map[string]string{}
	for _, m := range c.spec.VolumeMounts {
		if host, ok := vols.hostPath(m.Name); ok {
			if m.SubPath != "" {
				host = filepath.Join(host, m.SubPath)
			}
			mounts[m.MountPath] = host
		}
	}
	return newPathTranslator(mounts)
}

// containerArgs is the process's argument list: the image binary is the
// entrypoint; command[1:] (when set) and args follow, with mountPaths
// translated to their host directories and then $(VAR) expanded: the
// values of variables (KUBECONFIG, volume locations) are host paths already,
// and one under a state directory in /tmp must not be rewritten into the
// Pod's /tmp emptyDir.
func containerArgs(spec corev1.Container, env map[string]string, paths *pathTranslator) []string {
	var args []string
	if len(spec.Command) > 1 {
		args = append(args, spec.Command[1:]...)
	}
	args = append(args, spec.Args...)
	for i := range args {
		args[i] = expand(paths.translate(args[i]), env)
	}
	return args
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand replaces $(VAR) with its value as Kubernetes does: unknown
// references stay as written and $$ escapes a dollar.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func envName(volume string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(volume))
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
