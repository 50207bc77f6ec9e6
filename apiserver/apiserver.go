package apiserver

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	authorizerunion "k8s.io/apiserver/pkg/authorization/union"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver/invokerouter"
	"kruntimes.io/kruntimes/apiserver/runtimedrestriction"
	runregistry "kruntimes.io/kruntimes/registry/run"
	runtimeregistry "kruntimes.io/kruntimes/registry/runtime"
)

// Config is the configuration of a kruntimes API server.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	// Invoke configures runs/invoke.
	Invoke InvokeConfig
}

// InvokeConfig configures runs/invoke.
type InvokeConfig struct {
	// Router says how invocations reach the runtimed that owns a Run.
	Router invokerouter.Config
	// MaxTimeout bounds every invocation.
	MaxTimeout time.Duration
}

// Server is a running kruntimes API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// CompletedConfig is a Config whose defaults are filled in; only it can
// build a Server.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	invoke  InvokeConfig
}

// Complete fills in the defaults of the generic server configuration.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.GenericConfig.Complete(), invoke: c.Invoke}
}

// New builds the server and installs the kruntimes.io API group.
func (c CompletedConfig) New() (*Server, error) {
	router := invokerouter.New(c.invoke.Router)
	runs, err := runregistry.NewStorage(Scheme, c.generic.RESTOptionsGetter, router, c.invoke.MaxTimeout)
	if err != nil {
		return nil, fmt.Errorf("building runs storage: %w", err)
	}
	// Before the handler chain is built from them.
	if err := restrictRuntimed(c.generic.Config, runs.Run); err != nil {
		return nil, err
	}
	generic, err := c.generic.New("kruntimes-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	// The scheme's parameter codec, not metav1's: runs/invoke decodes its
	// own options (RunInvokeOptions) from the query.
	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(kruntimes.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)

	runtimes, err := runtimeregistry.NewStorage(Scheme, c.generic.RESTOptionsGetter)
	if err != nil {
		return nil, fmt.Errorf("building runtimes storage: %w", err)
	}
	apiGroupInfo.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"runs":            runs.Run,
		"runs/status":     runs.Status,
		"runs/invoke":     runs.Invoke,
		"runs/log":        runs.Log,
		"runtimes":        runtimes.Runtime,
		"runtimes/status": runtimes.Status,
	}
	if err := generic.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}
	// Every replica routes invocations, leader or not.
	if err := generic.AddPostStartHook("start-runs-invoke", func(hookCtx genericapiserver.PostStartHookContext) error {
		router.Start(hookCtx, runs.Run)
		return nil
	}); err != nil {
		return nil, err
	}
	return &Server{GenericAPIServer: generic}, nil
}

// restrictRuntimed puts runtimedrestriction in front of the configured
// authorizer and behind the configured admission plugins, so a Runtime Pod's
// runtimed reaches only its own Runs and everyone else is served as before.
func restrictRuntimed(config *genericapiserver.Config, runs *runregistry.REST) error {
	getRun := func(ctx context.Context, namespace, name string) (*kruntimes.Run, error) {
		obj, err := runs.Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*kruntimes.Run), nil
	}
	authorizers := []authorizerunion.NamedAuthorizer{{AuthorizerName: runtimedrestriction.PluginName, Authorizer: runtimedrestriction.NewAuthorizer(getRun)}}
	if config.Authorization.Authorizer != nil {
		authorizers = append(authorizers, authorizerunion.NamedAuthorizer{AuthorizerName: "configured", Authorizer: config.Authorization.Authorizer})
	}
	union, err := authorizerunion.New(authorizers...)
	if err != nil {
		return err
	}
	config.Authorization.Authorizer = union

	plugins := admission.NewChainHandler(runtimedrestriction.NewAdmission())
	if config.AdmissionControl != nil {
		plugins = admission.NewChainHandler(config.AdmissionControl, runtimedrestriction.NewAdmission())
	}
	config.AdmissionControl = plugins
	return nil
}
