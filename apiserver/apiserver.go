package apiserver

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	runregistry "kruntimes.io/kruntimes/registry/run"
	runtimeregistry "kruntimes.io/kruntimes/registry/runtime"
)

// Config is the configuration of a kruntimes API server.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
}

// Server is a running kruntimes API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// CompletedConfig is a Config whose defaults are filled in; only it can
// build a Server.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
}

// Complete fills in the defaults of the generic server configuration.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.GenericConfig.Complete()}
}

// New builds the server and installs the kruntimes.io API group.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("kruntimes-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(kruntimes.GroupName, Scheme, metav1.ParameterCodec, Codecs)

	runs, err := runregistry.NewStorage(Scheme, c.generic.RESTOptionsGetter)
	if err != nil {
		return nil, fmt.Errorf("building runs storage: %w", err)
	}
	runtimes, err := runtimeregistry.NewStorage(Scheme, c.generic.RESTOptionsGetter)
	if err != nil {
		return nil, fmt.Errorf("building runtimes storage: %w", err)
	}
	apiGroupInfo.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"runs":            runs.Run,
		"runs/status":     runs.Status,
		"runtimes":        runtimes.Runtime,
		"runtimes/status": runtimes.Status,
	}
	if err := generic.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}
	return &Server{GenericAPIServer: generic}, nil
}
