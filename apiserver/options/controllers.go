package options

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/controllers/manager"
	"kruntimes.io/kruntimes/controllers/recovery"
)

// controllersStopTimeout bounds how long shutdown waits for the hosted
// controllers to stop and release their leader Lease, so another replica
// takes over at once instead of after the Lease expires.
const controllersStopTimeout = 5 * time.Second

// ControllersOptions host the kruntimes controllers (runtime, scheduler,
// recovery, gc) in the API server process. They reach the kruntimes.io API
// through the server's loopback and the cluster through the CoreAPI
// kubeconfig, and compete for the same leader Lease as
// kruntimes-controllers.
type ControllersOptions struct {
	Enabled bool
	// RuntimedCAKeyFile lets the runtime controller issue each Runtime's
	// invoke Secret from the CA of --runtimed-ca-file (RuntimedCAFile).
	RuntimedCAKeyFile string
	RuntimedCAFile    string
	// EndpointBase is what Ready functions advertise in status.endpoint.
	EndpointBase string
	// HeartbeatGracePeriod is how long recovery lets a Runtime Pod's
	// runtimed heartbeat stay stale before it deletes the Pod.
	HeartbeatGracePeriod time.Duration

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// NewControllersOptions returns the default: controllers on.
func NewControllersOptions() *ControllersOptions {
	return &ControllersOptions{Enabled: true, HeartbeatGracePeriod: recovery.DefaultHeartbeatGracePeriod}
}

// AddFlags registers --controllers and the controllers' settings.
func (o *ControllersOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "controllers", o.Enabled,
		"Run the kruntimes controllers (Runtime pools, Run scheduler, recovery of Runs from lost Pods, Run TTL cleanup) in this process, leader-elected through the Lease kruntimes-system/kruntimes-controllers; set false when kruntimes-controllers runs them. Always off with --standalone, which has no cluster.")
	fs.DurationVar(&o.HeartbeatGracePeriod, "recovery-heartbeat-grace-period", o.HeartbeatGracePeriod,
		"How long a Runtime Pod's runtimed heartbeat may stay stale, after its Lease expired, before recovery deletes the Pod and moves its Runs to other Pods (as kube-controller-manager's --node-monitor-grace-period does for a Node).")
	fs.StringVar(&o.RuntimedCAKeyFile, "runtimed-ca-key-file", o.RuntimedCAKeyFile,
		"Key of --runtimed-ca-file: with it the runtime controller issues and renews each Runtime's invoke Secret (runtime-<name>-tls); without it those Secrets must be provided (e.g. by cert-manager).")
	fs.StringVar(&o.EndpointBase, "invoke-endpoint-base", o.EndpointBase,
		"Scheme and host of the Kubernetes API as clients reach it, which Ready function Runs advertise in status.endpoint.url; https://kubernetes.default.svc when empty.")
}

// Validate checks the controllers' settings.
func (o *ControllersOptions) Validate() []error {
	if o.HeartbeatGracePeriod < 0 {
		return []error{fmt.Errorf("--recovery-heartbeat-grace-period must not be negative, got %s", o.HeartbeatGracePeriod)}
	}
	return nil
}

// Complete turns the controllers off in standalone mode: without a
// cluster there are no Pods to schedule onto.
func (o *ControllersOptions) Complete(standalone bool) {
	if standalone {
		o.Enabled = false
	}
}

// ApplyTo starts the controllers in a post-start hook, once the loopback
// client can reach this server, and stops them in a pre-shutdown hook.
// coreAPI is the cluster's client config (RecommendedConfig.ClientConfig).
func (o *ControllersOptions) ApplyTo(server *genericapiserver.GenericAPIServer, coreAPI *rest.Config) error {
	if !o.Enabled {
		return nil
	}
	if coreAPI == nil {
		return errors.New("--controllers needs the cluster's API: pass --kubeconfig (or run in a cluster), or set --controllers=false")
	}
	if err := server.AddPostStartHook("start-kruntimes-controllers", func(hookCtx genericapiserver.PostStartHookContext) error {
		cfg := manager.NewConfig()
		cfg.KubeConfig, cfg.KruntimesConfig = coreAPI, hookCtx.LoopbackClientConfig
		tls, err := manager.LoadRuntimedTLS(o.RuntimedCAFile, o.RuntimedCAKeyFile)
		if err != nil {
			return err
		}
		cfg.RuntimedTLS = tls
		cfg.EndpointBase = o.EndpointBase
		cfg.HeartbeatGracePeriod = o.HeartbeatGracePeriod
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
