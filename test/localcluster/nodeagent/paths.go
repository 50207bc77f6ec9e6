package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pathTranslator rewrites a container's volumeMount paths (/workspace,
// /run/kruntimes, …) to the host directories backing them, wherever they
// appear in its args and env values. Without mount namespaces this is what
// lets a Pod spec written for a real kubelet run unchanged here.
type pathTranslator struct {
	pattern *regexp.Regexp
	host    map[string]string
}

// pathChar is what may continue a path element; a mountPath only matches
// where it starts and ends at a boundary, so /workspace in a host path such
// as /home/u/workspace/x is left alone.
const pathChar = `A-Za-z0-9._-`

func newPathTranslator(mounts map[string]string) *pathTranslator {
	if len(mounts) == 0 {
		return &pathTranslator{}
	}
	paths := make([]string, 0, len(mounts))
	for p := range mounts {
		paths = append(paths, p)
	}
	// Longest first, so /run/kruntimes wins over /run.
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	quoted := make([]string, len(paths))
	for i, p := range paths {
		quoted[i] = regexp.QuoteMeta(strings.TrimSuffix(p, "/"))
	}
	pattern := regexp.MustCompile(`(^|[^` + pathChar + `])(` + strings.Join(quoted, "|") + `)(/|$|[^` + pathChar + `])`)
	host := make(map[string]string, len(mounts))
	for p, h := range mounts {
		host[strings.TrimSuffix(p, "/")] = h
	}
	return &pathTranslator{pattern: pattern, host: host}
}

// translate returns s with every mountPath replaced by its host directory.
func (t *pathTranslator) translate(s string) string {
	if t.pattern == nil {
		return s
	}
	return t.pattern.ReplaceAllStringFunc(s, func(m string) string {
		sub := t.pattern.FindStringSubmatch(m)
		return sub[1] + t.host[sub[2]] + sub[3]
	})
}

// writeInClusterKubeconfig writes a kubeconfig that reaches kube-apiserver
// with the Pod's projected service-account token, for binaries that load
// client configuration the standard way (KUBECONFIG, then in-cluster): the
// in-cluster loader reads a fixed path this agent cannot provide.
func writeInClusterKubeconfig(path, server, serviceAccountDir string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{
		Server:               server,
		CertificateAuthority: filepath.Join(serviceAccountDir, "ca.crt"),
	}
	cfg.AuthInfos["serviceaccount"] = &clientcmdapi.AuthInfo{TokenFile: filepath.Join(serviceAccountDir, "token")}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "serviceaccount"}
	if ns, err := os.ReadFile(filepath.Join(serviceAccountDir, "namespace")); err == nil {
		cfg.Contexts["local"].Namespace = strings.TrimSpace(string(ns))
	}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing the Pod's kubeconfig %s: %w", path, err)
	}
	return nil
}
