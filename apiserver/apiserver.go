package apiserver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authorizerunion "k8s.io/apiserver/pkg/authorization/union"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver/entrypoint"
	"kruntimes.io/kruntimes/apiserver/invokerouter"
	"kruntimes.io/kruntimes/apiserver/runtimedrestriction"
	runregistry "kruntimes.io/kruntimes/registry/run"
	logstore "kruntimes.io/kruntimes/registry/runlog"
	runtimeregistry "kruntimes.io/kruntimes/registry/runtime"
)

// Config is the configuration of a kruntimes API server.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	// Invoke configures runs/invoke.
	Invoke InvokeConfig
	// RefuseDirect puts entrypoint.Gate ahead of every authorizer: requests
	// that reached the server directly (--direct-entry-point=false), which
	// the authenticator marked, are refused.
	RefuseDirect bool
	// Logs bound the kept task logs.
	Logs LogConfig
	// Events is where the server records Events users should see (a Run
	// whose log was kept cut); nil, without a cluster: none.
	Events typedcorev1.EventsGetter
}

// LogConfig bounds the kept task logs and sweeps the orphaned ones.
type LogConfig struct {
	Limits logstore.Limits
	// SweepInterval is how often log records no Run holds are deleted and
	// each namespace's bytes counted again; 0: never.
	SweepInterval time.Duration
}

// InvokeConfig configures runs/invoke.
type InvokeConfig struct {
	// Router says how invocations reach the runtimed that owns a Run.
	Router invokerouter.Config
	// MaxTimeout bounds every invocation.
	MaxTimeout time.Duration
	// WaitForReady is how long an invocation of a function on its way to
	// Ready waits for it before it is answered 503 + Retry-After.
	WaitForReady time.Duration
	// Endpoint is what Ready function Runs advertise in status.endpoint.
	Endpoint runregistry.Endpoint
}

// Server is a running kruntimes API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// CompletedConfig is a Config whose defaults are filled in; only it can
// build a Server.
type CompletedConfig struct {
	generic      genericapiserver.CompletedConfig
	invoke       InvokeConfig
	refuseDirect bool
	logs         LogConfig
	events       typedcorev1.EventsGetter
}

// Complete fills in the defaults of the generic server configuration.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.GenericConfig.Complete(), invoke: c.Invoke, refuseDirect: c.RefuseDirect, logs: c.Logs, events: c.Events}
}

// New builds the server and installs the kruntimes.io API group.
func (c CompletedConfig) New() (*Server, error) {
	router := invokerouter.New(c.invoke.Router)
	logSettings := runregistry.LogSettings{Limits: c.logs.Limits}
	var events record.EventBroadcaster
	if c.events != nil {
		events = record.NewBroadcaster()
		logSettings.Events = events.NewRecorder(Scheme, corev1.EventSource{Component: "kruntimes-apiserver"})
	}
	runs, err := runregistry.NewStorage(Scheme, c.generic.RESTOptionsGetter, router, router,
		runregistry.InvokeSettings{MaxTimeout: c.invoke.MaxTimeout, WaitForReady: c.invoke.WaitForReady}, c.invoke.Endpoint, logSettings)
	if err != nil {
		return nil, fmt.Errorf("building runs storage: %w", err)
	}
	// Before the handler chain is built from them.
	if err := restrictRuntimed(c.generic.Config, runs.Run); err != nil {
		return nil, err
	}
	if c.refuseDirect {
		if err := gateDirect(c.generic.Config); err != nil {
			return nil, err
		}
	}
	// Held out of its Service until invocations can be routed.
	c.generic.AddReadyzChecks(router.ReadyzCheck())
	// Taken now: the generic server signals the same channel once the
	// requests in flight drained.
	drained := c.generic.DrainedNotify()
	generic, err := c.generic.New("kruntimes-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	// After the requests drained, the HTTP server's Shutdown waits only for
	// connections still busy (a request past its timeout, a hijacked one):
	// not worth a minute of a Pod's termination grace.
	generic.ShutdownTimeout = min(generic.ShutdownTimeout, httpShutdownTimeout)
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
		"runs/files":      runs.Files,
		"runtimes":        runtimes.Runtime,
		"runtimes/status": runtimes.Status,
	}
	if err := generic.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}
	// Every replica routes invocations, leader or not, and until the last
	// one in flight answered: the hook's context ends when the server stops
	// accepting requests (at SIGTERM without a shutdown delay), while
	// invocations that arrived before still run, and new ones are served
	// through the delay.
	if err := generic.AddPostStartHook("start-runs-invoke", func(hookCtx genericapiserver.PostStartHookContext) error {
		router.Start(untilClosed(hookCtx, drained), runs.Run)
		return nil
	}); err != nil {
		return nil, err
	}
	if events != nil {
		if err := generic.AddPostStartHook("start-kruntimes-events", func(hookCtx genericapiserver.PostStartHookContext) error {
			events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.events.Events("")})
			go func() {
				<-hookCtx.Done()
				events.Shutdown()
			}()
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if c.logs.SweepInterval > 0 {
		if err := generic.AddPostStartHook("start-runs-log-sweep", func(hookCtx genericapiserver.PostStartHookContext) error {
			go runs.Log.SweepEvery(hookCtx, c.logs.SweepInterval)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return &Server{GenericAPIServer: generic}, nil
}

// httpShutdownTimeout bounds the HTTP server's Shutdown, which starts once
// the requests in flight drained (see ShutdownOptions.SendRetryAfter); it is
// what the generic server uses with --shutdown-send-retry-after.
const httpShutdownTimeout = 2 * time.Second

// untilClosed is a context with ctx's values that ends when done is closed,
// whenever ctx ends.
func untilClosed(ctx context.Context, done <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-done
		cancel()
	}()
	return ctx
}

// gateDirect puts entrypoint.Gate ahead of every other authorizer, so that
// none of them (runtimedrestriction allows runtimed's own Runs) serves a
// direct request while the direct entry point is off.
func gateDirect(config *genericapiserver.Config) error {
	return authorizeFirst(config, "direct-entry-point", entrypoint.Gate{})
}

// authorizeFirst puts first, named name, in front of the configured
// authorizer: its decisions stand, and what it has no opinion on goes on.
func authorizeFirst(config *genericapiserver.Config, name string, first authorizer.Authorizer) error {
	authorizers := []authorizerunion.NamedAuthorizer{{AuthorizerName: name, Authorizer: first}}
	if config.Authorization.Authorizer != nil {
		authorizers = append(authorizers, authorizerunion.NamedAuthorizer{AuthorizerName: "configured", Authorizer: config.Authorization.Authorizer})
	}
	union, err := authorizerunion.New(authorizers...)
	if err != nil {
		return err
	}
	config.Authorization.Authorizer = union
	return nil
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
	if err := authorizeFirst(config, runtimedrestriction.PluginName, runtimedrestriction.NewAuthorizer(getRun)); err != nil {
		return err
	}
	plugins := admission.NewChainHandler(runtimedrestriction.NewAdmission())
	if config.AdmissionControl != nil {
		plugins = admission.NewChainHandler(config.AdmissionControl, runtimedrestriction.NewAdmission())
	}
	config.AdmissionControl = plugins
	return nil
}
