package options

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	baseversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver"
	"kruntimes.io/kruntimes/apiserver/entrypoint"
	"kruntimes.io/kruntimes/apiserver/memlimit"
	kruntimesopenapi "kruntimes.io/kruntimes/apiserver/openapi"
	runregistry "kruntimes.io/kruntimes/registry/run"
	"kruntimes.io/kruntimes/registry/storage/embedded"
	"kruntimes.io/kruntimes/version"
)

const (
	etcdPathPrefix              = "/registry/kruntimes.io"
	watchTerminationGracePeriod = 5 * time.Second
)

// ServerOptions are the flags of kruntimes-apiserver.
type ServerOptions struct {
	RecommendedOptions       *genericoptions.RecommendedOptions
	Storage                  *StorageOptions
	Standalone               *StandaloneOptions
	Controllers              *HostedControllersOptions
	Invoke                   *InvokeOptions
	Shutdown                 *ShutdownOptions
	Logs                     *LogOptions
	ComponentGlobalsRegistry basecompatibility.ComponentGlobalsRegistry

	// AlternateDNS are extra names for the self-signed serving certificate,
	// e.g. the <service>.<namespace>.svc name the aggregator dials.
	AlternateDNS []string
	// GoMemoryLimit is the Go runtime's soft memory limit: memlimit.Auto,
	// memlimit.Off or a quantity.
	GoMemoryLimit string
	// DirectEntryPoint serves the API to callers that reach this server
	// itself, not only to those kube-apiserver proxies.
	DirectEntryPoint bool

	Out, ErrOut io.Writer
}

// NewServerOptions returns the defaults: the embedded backend, delegated
// authentication and authorization against the cluster.
func NewServerOptions(out, errOut io.Writer) *ServerOptions {
	o := &ServerOptions{
		RecommendedOptions: genericoptions.NewRecommendedOptions(etcdPathPrefix,
			apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)),
		Standalone:               &StandaloneOptions{},
		Controllers:              NewHostedControllersOptions(),
		Invoke:                   NewInvokeOptions(),
		Shutdown:                 NewShutdownOptions(),
		Logs:                     NewLogOptions(),
		ComponentGlobalsRegistry: basecompatibility.NewComponentGlobalsRegistry(),
		AlternateDNS:             []string{"kruntimes-apiserver.kruntimes-system.svc"},
		GoMemoryLimit:            memlimit.Auto,
		DirectEntryPoint:         true,
		Out:                      out,
		ErrOut:                   errOut,
	}
	o.Storage = NewStorageOptions(o.RecommendedOptions.Etcd)
	addTenancyAdmission(o.RecommendedOptions)
	setDelegationCaches(o.RecommendedOptions)
	o.RecommendedOptions.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(
		v1alpha1.SchemeGroupVersion, schema.GroupKind{Group: v1alpha1.GroupName})
	// Store objects as protobuf, as kube-apiserver does; --storage-media-type
	// overrides it. Objects are read back in any encoding (see storageCodec).
	o.RecommendedOptions.Etcd.DefaultStorageMediaType = runtime.ContentTypeProtobuf
	_, _ = o.ComponentGlobalsRegistry.ComponentGlobalsOrRegister(basecompatibility.DefaultKubeComponent,
		basecompatibility.NewEffectiveVersionFromString(baseversion.DefaultKubeBinaryVersion, "", ""),
		utilfeature.DefaultMutableFeatureGate)
	return o
}

// NewCommand returns the kruntimes-apiserver command.
func NewCommand(ctx context.Context, o *ServerOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kruntimes-apiserver",
		Short: "Serve the kruntimes.io API (Runs and Runtimes) as a Kubernetes aggregated API server",
		Long: `kruntimes-apiserver serves Runs and Runtimes of the kruntimes.io API group.
It runs behind kube-apiserver through an APIService, authenticating and
authorizing every request against the cluster, and stores its objects in its
own storage: an embedded durable file by default, or etcd.`,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return o.ComponentGlobalsRegistry.Set()
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(args); err != nil {
				return err
			}
			return o.Run(c.Context())
		},
		SilenceUsage: true,
		Version:      version.Get().String(),
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	return cmd
}

// AddFlags registers every flag on fs.
func (o *ServerOptions) AddFlags(fs *pflag.FlagSet) {
	o.RecommendedOptions.AddFlags(fs)
	o.Storage.AddFlags(fs)
	o.Standalone.AddFlags(fs)
	o.Controllers.AddFlags(fs)
	o.Invoke.AddFlags(fs)
	o.Shutdown.AddFlags(fs)
	o.Logs.AddFlags(fs)
	o.ComponentGlobalsRegistry.AddFlags(fs)
	fs.StringSliceVar(&o.AlternateDNS, "alternate-dns", o.AlternateDNS,
		"Extra DNS names of the self-signed serving certificate; include <service>.<namespace>.svc so the aggregator can verify it.")
	fs.BoolVar(&o.DirectEntryPoint, "direct-entry-point", o.DirectEntryPoint,
		"Serve the API to callers that reach this server itself (its Service, with a bearer token or a client certificate), besides those kube-apiserver proxies. When false, such a request is refused with 403, except the probes and /metrics; kube-apiserver's aggregation and this process's own clients are unaffected. The Helm chart sets it false unless invokeEndpoint or runtimedAPI is direct.")
	fs.StringVar(&o.GoMemoryLimit, "go-memory-limit", o.GoMemoryLimit,
		"The Go runtime's soft memory limit, under which it collects garbage harder rather than let the heap grow to twice its live size: \"auto\" (90% of the container's memory limit, when it has one), \"off\", or a quantity such as 900Mi. The GOMEMLIMIT environment variable, when set, wins.")
}

// Complete fills in what depends on other flags: the generic options keep
// etcd only when it is the backend (Storage keeps the etcd options, whose
// storage settings the embedded backend uses too), and standalone mode drops
// every dependency on a cluster.
func (o *ServerOptions) Complete() error {
	if o.Storage.Backend() != BackendEtcd3 {
		// --etcd-servers is required, and etcd dialed, only when etcd is
		// the backend.
		o.RecommendedOptions.Etcd = nil
	}
	o.Controllers.Complete(o.Standalone.Enabled, o.Invoke.CAFile)
	if o.Standalone.Enabled {
		r := o.RecommendedOptions
		r.Authentication, r.Authorization, r.CoreAPI, r.Admission = nil, nil, nil, nil
		r.Features.EnablePriorityAndFairness = false
	}
	return nil
}

// Validate checks the completed flags; it changes nothing.
func (o *ServerOptions) Validate(args []string) error {
	var errs []error
	if len(args) > 0 {
		errs = append(errs, fmt.Errorf("kruntimes-apiserver takes no arguments, got %q", args))
	}
	errs = append(errs, o.RecommendedOptions.Validate()...)
	errs = append(errs, validateDelegationCaches(o.RecommendedOptions)...)
	errs = append(errs, o.Storage.Validate()...)
	errs = append(errs, o.Invoke.Validate()...)
	errs = append(errs, o.Controllers.Validate()...)
	errs = append(errs, o.Shutdown.Validate()...)
	errs = append(errs, o.Logs.Validate()...)
	if !o.DirectEntryPoint && o.Standalone.Enabled {
		errs = append(errs, fmt.Errorf("--direct-entry-point=false refuses every request that kube-apiserver did not proxy, and --standalone has no kube-apiserver: drop one of them"))
	}
	if err := memlimit.Validate(o.GoMemoryLimit); err != nil {
		errs = append(errs, fmt.Errorf("--go-memory-limit: %w", err))
	}
	errs = append(errs, o.ComponentGlobalsRegistry.Validate()...)
	return utilerrors.NewAggregate(errs)
}

// Config builds the server configuration. The returned close function
// releases the storage backend; call it after the server stopped.
func (o *ServerOptions) Config() (*apiserver.Config, func(), error) {
	if err := o.RecommendedOptions.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", o.AlternateDNS,
		[]net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, nil, fmt.Errorf("creating self-signed serving certificates: %w", err)
	}

	serverConfig := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	// End open watches (runtimed's, controllers') when shutting down instead
	// of holding the process until the HTTP server's shutdown timeout; their
	// informers re-establish them against the next server.
	serverConfig.ShutdownWatchTerminationGracePeriod = watchTerminationGracePeriod
	o.Shutdown.ApplyTo(&serverConfig.Config)
	serverConfig.LongRunningFunc = runregistry.LongRunning(serverConfig.LongRunningFunc)
	namer := openapi.NewDefinitionNamer(apiserver.Scheme)
	serverConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(kruntimesopenapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIConfig.Info.Title = "kruntimes"
	serverConfig.OpenAPIConfig.Info.Version = v1alpha1.SchemeGroupVersion.Version
	serverConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(kruntimesopenapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIV3Config.Info.Title = "kruntimes"
	serverConfig.OpenAPIV3Config.Info.Version = v1alpha1.SchemeGroupVersion.Version
	serverConfig.FeatureGate = o.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	serverConfig.EffectiveVersion = o.ComponentGlobalsRegistry.EffectiveVersionFor(basecompatibility.DefaultKubeComponent)

	embeddedBackend := o.Storage.Backend() == BackendEmbedded
	etcd := o.Storage.Etcd
	// The generic options pass StorageConfig.Codec through unchanged (only
	// kube-apiserver's storage factory honours --storage-media-type), so
	// both backends get a codec for it here.
	codec, encodeVersioner, err := storageCodec(etcd.DefaultStorageMediaType)
	if err != nil {
		return nil, nil, err
	}
	etcd.StorageConfig.Codec, etcd.StorageConfig.EncodeVersioner = codec, encodeVersioner
	// Without etcd as the backend, Complete dropped the etcd options from
	// the generic ones, so ApplyTo configures no etcd storage.
	if err := o.RecommendedOptions.ApplyTo(serverConfig); err != nil {
		return nil, nil, err
	}
	wrapAuthenticator(serverConfig, entrypoint.DirectPolicy(o.DirectEntryPoint))

	closeStorage := func() {}
	if embeddedBackend {
		backend, err := embedded.Open(o.Storage.Path, embedded.Options{})
		if err != nil {
			return nil, nil, err
		}
		closeStorage = func() {
			if err := backend.Close(); err != nil {
				klog.ErrorS(err, "Closing the embedded storage", "path", backend.Path())
			}
		}
		serverConfig.RESTOptionsGetter = backend.RESTOptionsGetter(etcd.StorageConfig)
		serverConfig.AddHealthChecks(backend.HealthChecker())
		// Not ready while the data file cannot be written (a full disk):
		// readyz only, since a restart frees no space.
		serverConfig.AddReadyzChecks(backend.WritableChecker())
	}
	if o.Standalone.Enabled {
		if err := o.Standalone.ApplyTo(serverConfig); err != nil {
			closeStorage()
			return nil, nil, err
		}
	}
	return &apiserver.Config{GenericConfig: serverConfig, RefuseDirect: !o.DirectEntryPoint, Logs: o.Logs.Config(o.Storage.Backend())}, closeStorage, nil
}

// Run starts the server and blocks until ctx is done.
func (o *ServerOptions) Run(ctx context.Context) error {
	limit, source, err := memlimit.Apply(o.GoMemoryLimit)
	if err != nil {
		return fmt.Errorf("--go-memory-limit: %w", err)
	}
	klog.FromContext(ctx).Info("Go memory limit", "bytes", limit, "source", source)
	config, closeStorage, err := o.Config()
	if err != nil {
		return err
	}
	defer closeStorage()
	if config.Invoke, err = o.Invoke.Config(ctx, config.GenericConfig.ClientConfig); err != nil {
		return err
	}
	if config.Invoke.Router.Kube != nil {
		// The cluster's client: Events go to kube-apiserver, where
		// kubectl describe finds them.
		config.Events = config.Invoke.Router.Kube.CoreV1()
	}
	server, err := config.Complete().New()
	if err != nil {
		return err
	}
	if o.Standalone.Enabled && o.Standalone.KubeconfigPath != "" {
		server.GenericAPIServer.AddPostStartHookOrDie("write-standalone-kubeconfig", func(genericapiserver.PostStartHookContext) error {
			return o.Standalone.WriteKubeconfig(o.RecommendedOptions.SecureServing)
		})
	}
	if err := o.Controllers.ApplyTo(server.GenericAPIServer, config.GenericConfig.ClientConfig); err != nil {
		return err
	}
	if config.GenericConfig.SharedInformerFactory != nil {
		server.GenericAPIServer.AddPostStartHookOrDie("start-kruntimes-informers", func(hookCtx genericapiserver.PostStartHookContext) error {
			config.GenericConfig.SharedInformerFactory.Start(hookCtx.Done())
			return nil
		})
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
