package options

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// StandaloneOptions run the server without a Kubernetes cluster, for
// development: one generated admin token instead of delegated authn/authz,
// no admission webhooks, no priority and fairness.
type StandaloneOptions struct {
	Enabled        bool
	KubeconfigPath string

	token string
}

// standaloneUser is who the generated token authenticates as.
const standaloneUser = "kruntimes-standalone-admin"

// AddFlags registers the standalone flags.
func (o *StandaloneOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "standalone", o.Enabled,
		"Run without a Kubernetes cluster, for development: only the token written to --standalone-kubeconfig is accepted, as cluster admin; delegated authentication, authorization and admission are off.")
	fs.StringVar(&o.KubeconfigPath, "standalone-kubeconfig", o.KubeconfigPath,
		"With --standalone, write a kubeconfig for kubectl and client-go that reaches this server as admin to this file once serving.")
}

// ApplyTo installs the generated-token authenticator and an authorizer that
// admits only system:masters.
func (o *StandaloneOptions) ApplyTo(c *genericapiserver.RecommendedConfig) error {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("generating the standalone admin token: %w", err)
	}
	o.token = base64.RawURLEncoding.EncodeToString(raw)
	// Config.Complete adds the loopback client's token to this authenticator.
	c.Authentication.Authenticator = authenticatorfactory.NewFromTokens(map[string]*user.DefaultInfo{
		o.token: {Name: standaloneUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
	}, nil)
	c.Authorization.Authorizer = authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)
	return nil
}

// WriteKubeconfig writes a kubeconfig that trusts the serving certificate and
// carries the admin token.
func (o *StandaloneOptions) WriteKubeconfig(serving *genericoptions.SecureServingOptionsWithLoopback) error {
	if serving.Listener == nil {
		return fmt.Errorf("cannot write %s: the server has no secure listener", o.KubeconfigPath)
	}
	_, port, err := net.SplitHostPort(serving.Listener.Addr().String())
	if err != nil {
		return err
	}
	host := serving.BindAddress.String()
	if serving.BindAddress.IsUnspecified() {
		host = "127.0.0.1"
	}
	caFile := serving.ServerCert.CertKey.CertFile
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("reading the serving certificate %s for the kubeconfig: %w", caFile, err)
	}
	const name = "kruntimes-standalone"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   "https://" + net.JoinHostPort(host, port),
		CertificateAuthorityData: ca,
	}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: o.token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	if err := os.MkdirAll(filepath.Dir(o.KubeconfigPath), 0o700); err != nil {
		return err
	}
	// Written aside and renamed, so a reader never sees half a file.
	tmp := o.KubeconfigPath + ".tmp"
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return fmt.Errorf("write the standalone kubeconfig %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, o.KubeconfigPath); err != nil {
		return fmt.Errorf("writing %s: %w", o.KubeconfigPath, err)
	}
	return nil
}
