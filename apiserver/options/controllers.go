package options

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/controllers/manager"
	controllersoptions "kruntimes.io/kruntimes/controllers/options"
)

// controllersStopTimeout bounds how long shutdown waits for the hosted
// controllers to stop and release their leader Lease, so another replica
// takes over at once instead of after the Lease expires.
const controllersStopTimeout = 5 * time.Second

// HostedControllersOptions host the kruntimes controllers (runtime,
// scheduler, recovery, gc) in the API server process. They reach the
// kruntimes.io API through the server's loopback and the cluster through the
// CoreAPI kubeconfig, and compete for the same leader Lease as
// kruntimes-controllers, with the same settings.
type HostedControllersOptions struct {
	Enabled bool
	*controllersoptions.ControllersOptions

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// NewHostedControllersOptions returns the default: controllers on.
func NewHostedControllersOptions() *HostedControllersOptions {
	return &HostedControllersOptions{Enabled: true, ControllersOptions: controllersoptions.NewControllersOptions()}
}

// AddFlags registers --controllers and the controllers' settings.
func (o *HostedControllersOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "controllers", o.Enabled,
		"Run the kruntimes controllers (Runtime pools, Run scheduler, recovery of Runs from lost Pods, Run TTL cleanup) in this process, leader-elected through the Lease kruntimes-system/kruntimes-controllers; set false when kruntimes-controllers runs them. Always off with --standalone, which has no cluster.")
	o.ControllersOptions.AddFlags(fs)
	o.AddLeaderElectionFlags(fs)
}

// Complete turns the controllers off in standalone mode, since without a
// cluster there are no Pods to schedule onto, and gives them the CA of the
// invoke client (--runtimed-ca-file).
func (o *HostedControllersOptions) Complete(standalone bool, runtimedCAFile string) {
	if standalone {
		o.Enabled = false
	}
	o.RuntimedCAFile = runtimedCAFile
}

// ApplyTo starts the controllers in a post-start hook, once the loopback
// client can reach this server, and stops them in a pre-shutdown hook.
// coreAPI is the cluster's client config (RecommendedConfig.ClientConfig).
func (o *HostedControllersOptions) ApplyTo(server *genericapiserver.GenericAPIServer, coreAPI *rest.Config) error {
	if !o.Enabled {
		return nil
	}
	if coreAPI == nil {
		return errors.New("--controllers needs the cluster's API: pass --kubeconfig (or run in a cluster), or set --controllers=false")
	}
	if err := server.AddPostStartHook("start-kruntimes-controllers", func(hookCtx genericapiserver.PostStartHookContext) error {
		cfg, err := o.Config(coreAPI, hookCtx.LoopbackClientConfig)
		if err != nil {
			return err
		}
		m, err := manager.New(cfg)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(hookCtx)
		done := make(chan struct{})
		o.mu.Lock()
		o.stop, o.done = cancel, done
		o.mu.Unlock()
		go func() {
			defer close(done)
			if err := m.Run(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "kruntimes controllers stopped")
			}
		}()
		return nil
	}); err != nil {
		return err
	}
	return server.AddPreShutdownHook("stop-kruntimes-controllers", func() error {
		o.mu.Lock()
		stop, done := o.stop, o.done
		o.mu.Unlock()
		if stop == nil {
			return nil
		}
		stop()
		select {
		case <-done:
		case <-time.After(controllersStopTimeout):
			klog.Background().Info("kruntimes controllers did not stop in time; their Lease expires on its own", "timeout", controllersStopTimeout)
		}
		return nil
	})
}
