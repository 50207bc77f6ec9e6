package apiserver

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	runregistry "kruntimes.io/kruntimes/registry/run"
	"kruntimes.io/kruntimes/registry/run/invoke"
	runtimeregistry "kruntimes.io/kruntimes/registry/runtime"
)

// Config is the configuration of a kruntimes API server.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	// Invoke configures runs/invoke; its Runs is filled in by New.
	Invoke invoke.Config
}

// Server is a running kruntimes API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// CompletedConfig is a Config whose defaults are filled in; only it can
// build a Server.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	invoke  invoke.Config
}

// Complete fills in the defaults of the generic server configuration.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.GenericConfig.Complete(), invoke: c.Invoke}
}

// New builds the server and installs the kruntimes.io API group.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("kruntimes-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	// The scheme's parameter codec, not metav1's: runs/invoke decodes its
	// own options (RunInvokeOptions) from the query.
	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(kruntimes.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)

	runs, err := runregistry.NewStorage(Scheme, c.generic.RESTOptionsGetter)
	if err != nil {
		return nil, fmt.Errorf("building runs storage: %w", err)
	}
	runtimes, err := runtimeregistry.NewStorage(Scheme, c.generic.RESTOptionsGetter)
	if err != nil {
		return nil, fmt.Errorf("building runtimes storage: %w", err)
	}
	invokeConfig := c.invoke
	invokeConfig.Runs = runs.Run
	invokeREST := invoke.NewREST(invokeConfig)
	apiGroupInfo.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"runs":            runs.Run,
		"runs/status":     runs.Status,
		"runs/invoke":     invokeREST,
		"runtimes":        runtimes.Runtime,
		"runtimes/status": runtimes.Status,
	}
	if err := generic.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}
	// Every replica routes invocations, leader or not.
	if err := generic.AddPostStartHook("start-runs-invoke", func(hookCtx genericapiserver.PostStartHookContext) error {
		invokeREST.Start(hookCtx)
		return nil
	}); err != nil {
		return nil, err
	}
	return &Server{GenericAPIServer: generic}, nil
}
