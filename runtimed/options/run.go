package options

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	kruntimesscheme "kruntimes.io/kruntimes/client/clientset/versioned/scheme"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	runlisters "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/proto/pki"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/functions"
	"kruntimes.io/kruntimes/runtimed/health"
	"kruntimes.io/kruntimes/runtimed/heartbeat"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/runtimed/metrics"
	"kruntimes.io/kruntimes/runtimed/slots"
	"kruntimes.io/kruntimes/runtimed/tasks"
	"kruntimes.io/kruntimes/runtimed/workspace"
	"kruntimes.io/kruntimes/version"
)

// workers is how many Runs each controller syncs at once; task waits run in
// their own goroutines, and each sync is mostly one status write, so enough
// workers keep writes to the API in flight at high capacity.
const workers = 16

// invokeShutdownGrace is how long invocations in flight may finish when
// runtimed stops.
const invokeShutdownGrace = 5 * time.Second

// NewCommand returns the runtimed command, which runs until ctx ends.
func NewCommand(ctx context.Context, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runtimed",
		Short: "Run the Runs assigned to this Runtime Pod on its Runtime Server",
		Long: `runtimed is the per-Pod daemon of a Runtime Pod. It heartbeats a Lease for
its Pod, claims the Runs the scheduler assigned to the Pod, executes task Runs
and registers function Runs on the Runtime Server over a unix socket, and
records what happened in the Runs' status. It serves /healthz, /readyz and
/metrics on the health port.`,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("runtimed takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			ctx := klog.NewContext(c.Context(), klog.Background().WithName("runtimed"))
			return o.Run(ctx)
		},
		SilenceUsage: true,
		Version:      version.Get().String(),
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	return cmd
}

// Run starts every part of runtimed and returns when one fails, or after
// ctx ends (SIGTERM: the Pod is deleted gracefully) and runtimed gave back
// the functions of this Pod for relocation.
func (o *Options) Run(signalCtx context.Context) error {
	logger := klog.FromContext(signalCtx)
	// Everything runs on until the functions are given back: the heartbeat
	// (so recovery waits for the release instead of fencing), the invoke
	// server (refusing, so callers get 503 with Retry-After), the informer.
	ctx, stopAll := context.WithCancel(context.WithoutCancel(signalCtx))
	defer stopAll()
	if o.MaxProcs > 0 && os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(o.MaxProcs)
	}
	restConfig, err := o.restConfig()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	runClient, err := versioned.NewForConfig(o.kruntimesConfig(restConfig))
	if err != nil {
		return err
	}

	path, _ := runtimepod.SocketPath(o.RuntimeSocket)
	conn, err := grpc.NewClient("unix://"+path,
		append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return fmt.Errorf("connect to the Runtime Server at %s: %w", o.RuntimeSocket, err)
	}
	defer conn.Close()
	runtimeServer := runtimev1.NewRuntimeClient(conn)

	metrics.Register()
	pod := runtimepod.Pod{Name: o.PodName, Namespace: o.PodNamespace, UID: types.UID(o.PodUID)}
	factory := externalversions.NewSharedInformerFactoryWithOptions(runClient, 0,
		externalversions.WithNamespace(o.PodNamespace),
		// Only this Pod's Runs: the apiserver indexes status.assignedPod, so
		// a Pod never sees, or pays for, the Runs of others; and only this
		// incarnation's, by UID, which the runtimed restriction requires.
		externalversions.WithTweakListOptions(func(opts *metav1.ListOptions) {
			opts.FieldSelector = fields.SelectorFromSet(fields.Set{
				lifecycle.FieldStatusAssignedPod:    o.PodName,
				lifecycle.FieldStatusAssignedPodUID: o.PodUID,
			}).String()
		}))
	// Events on Runs tell users what happened to their attempt.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events(o.PodNamespace)})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(kruntimesscheme.Scheme, corev1.EventSource{Component: "runtimed", Host: o.PodName})

	table, err := slots.New(o.Capacity)
	if err != nil {
		return err
	}
	runInformer := factory.Kruntimes().V1alpha1().Runs()
	root := workspace.Root(o.WorkspaceDir)
	beat := heartbeat.New(kube.CoordinationV1(), pod, clock.RealClock{})
	taskController, err := tasks.New(tasks.Config{
		Runs:          runClient.KruntimesV1alpha1(),
		Informer:      runInformer,
		RuntimeServer: runtimeServer,
		Workspace:     root,
		Pod:           pod,
		Slots:         table,
		Clock:         clock.RealClock{},
		Recorder:      recorder,
	})
	if err != nil {
		return err
	}
	functionController, err := functions.New(functions.Config{
		Runs:          runClient.KruntimesV1alpha1(),
		Informer:      runInformer,
		RuntimeServer: runtimev1.NewFunctionRuntimeClient(conn),
		Workspace:     root,
		Pod:           pod,
		Slots:         table,
		Clock:         clock.RealClock{},
		Recorder:      recorder,
		Heartbeat:     beat,
	})
	if err != nil {
		return err
	}

	readiness := []health.Check{
		{Name: "runs-informer", Check: func(context.Context) error {
			if !runInformer.Informer().HasSynced() {
				return fmt.Errorf("the Run informer has not synced yet")
			}
			return nil
		}},
		{Name: "heartbeat", Check: func(context.Context) error { return beat.Fresh() }},
		{Name: "runtime-server", Check: func(ctx context.Context) error {
			resp, err := runtimeServer.Health(ctx, &runtimev1.HealthRequest{})
			if err != nil {
				return fmt.Errorf("the Health RPC over %s failed: %w", o.RuntimeSocket, err)
			}
			if !resp.GetServing() {
				return fmt.Errorf("the Runtime Server is not serving")
			}
			return nil
		}},
	}
	liveness := append([]health.Check{
		{Name: "runs-informer", Check: func(context.Context) error {
			if runInformer.Informer().IsStopped() {
				return fmt.Errorf("the Run informer stopped")
			}
			return nil
		}},
		taskController.Liveness(),
	}, functionController.Liveness()...)

	logger.Info("Starting runtimed", "pod", klog.KRef(o.PodNamespace, o.PodName), "podUID", o.PodUID,
		"capacity", o.Capacity, "runtimeSocket", o.RuntimeSocket, "workspace", o.WorkspaceDir)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		select {
		case <-ctx.Done():
			return nil // a part failed
		case <-signalCtx.Done():
		}
		// Claim nothing more, then give back every function, bounded by
		// less than the Pod's termination grace.
		logger.Info("Shutting down: relocating this Pod's functions", "drain", o.ShutdownDrain, "timeout", o.ShutdownTimeout)
		table.Close()
		relocateCtx, cancel := context.WithTimeout(ctx, o.ShutdownTimeout)
		functionController.Relocate(relocateCtx, o.ShutdownDrain)
		cancel()
		stopAll()
		return nil
	})
	g.Go(func() error { return health.Serve(ctx, o.HealthAddress, health.Handler(liveness, readiness)) })
	g.Go(func() error { beat.Run(ctx); return nil })
	if o.InvokeCertFile != "" {
		server := invoke.NewServer(functionController, runtimev1.NewFunctionRuntimeClient(conn), o.RuntimeName).FollowTasks(ctx, runtimeServer, pod.UID).Bound(beat).
			Deduplicate(invoke.DedupConfig{Window: o.InvokeDedupWindow, MaxEntries: o.InvokeDedupMaxEntries, MaxBytes: o.InvokeDedupMaxBytes,
				MaxPodBytes: o.InvokeDedupMaxPodBytes})
		g.Go(func() error { return o.serveInvoke(ctx, server) })
	} else {
		logger.Info("No --invoke-tls-cert-file: the invoke server is off, and this Pod's functions cannot be invoked")
	}
	factory.Start(ctx.Done())
	g.Go(func() error {
		if !cache.WaitForNamedCacheSyncWithContext(ctx, runInformer.Informer().HasSynced) {
			return nil
		}
		// Before any claim: the directories no Run of this Pod holds any
		// more, e.g. left by a runtimed that stopped before it cleaned up.
		sweepWorkspaces(ctx, root, runInformer.Lister(), pod)
		g.Go(func() error { taskController.Run(ctx, workers); return nil })
		g.Go(func() error { functionController.Run(ctx, workers); return nil })
		return nil
	})
	err = g.Wait()
	factory.Shutdown()
	return err
}

// restConfig is the client configuration: --kubeconfig, $KUBECONFIG or the
// Pod's service account, speaking protobuf.
func (o *Options) restConfig() (*rest.Config, error) {
	loader := clientcmd.NewDefaultClientConfigLoadingRules()
	loader.ExplicitPath = o.Kubeconfig
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loader, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load the Kubernetes client configuration: %w; pass --kubeconfig or run in a Pod with a service account", err)
	}
	restConfig.UserAgent = "runtimed/" + o.PodName
	restConfig.QPS, restConfig.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	// Protobuf on the wire, as Kubernetes' own components: every event of
	// runtimed's watch is decoded, at a tenth of JSON's cost.
	restConfig.ContentType = runtime.ContentTypeProtobuf
	restConfig.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return restConfig, nil
}

// kruntimesConfig is restConfig for the kruntimes.io API: the same
// credentials and limits, at --kruntimes-api-server when it is set, which
// is verified with $KRUNTIMES_API_CA alone.
func (o *Options) kruntimesConfig(restConfig *rest.Config) *rest.Config {
	if o.KruntimesAPIServer == "" {
		return restConfig
	}
	c := rest.CopyConfig(restConfig)
	c.Host = o.KruntimesAPIServer
	c.TLSClientConfig.CAFile, c.TLSClientConfig.CAData = "", []byte(o.KruntimesAPICA)
	c.TLSClientConfig.ServerName, c.TLSClientConfig.Insecure = "", false
	return c
}

// sweepWorkspaces removes the workspace directories of Runs that are not
// assigned to this Pod in a phase that uses one (Scheduled, Running, Ready):
// tasks and functions alike.
func sweepWorkspaces(ctx context.Context, root workspace.Root, runs runlisters.RunLister, pod runtimepod.Pod) {
	logger := klog.FromContext(ctx)
	// Listed on the first call, after Sweep read the directories: a Run
	// whose directory exists was assigned before, so the list has it.
	var held map[types.UID]bool
	removed, err := root.Sweep(func(uid types.UID) bool {
		if held == nil {
			list, err := runs.Runs(pod.Namespace).List(labels.Everything())
			if err != nil {
				return true // keep what cannot be checked
			}
			held = map[types.UID]bool{}
			for _, run := range list {
				held[run.UID] = run.Status.AssignedPodUID == pod.UID && lifecycle.IsActive(run.Status.Phase)
			}
		}
		return held[uid]
	})
	if err != nil {
		logger.Error(err, "Sweeping leftover workspaces failed")
	}
	for _, uid := range removed {
		logger.Info("Removed a leftover workspace no Run of this Pod holds", "runUID", uid)
	}
}

// serveInvoke serves the apiserver's invocations until ctx ends.
func (o *Options) serveInvoke(ctx context.Context, server *invoke.Server) error {
	serverTLS, err := pki.ServerTLS(ctx, o.InvokeCertFile, o.InvokeKeyFile, o.InvokeClientCAFile, invocation.ClientCommonName)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", o.InvokeAddress)
	if err != nil {
		return fmt.Errorf("listen on %s for invocations: %w; pick another --invoke-address", o.InvokeAddress, err)
	}
	gs := grpc.NewServer(append(transport.RuntimedServerOptions(), grpc.Creds(credentials.NewTLS(serverTLS)))...)
	runtimedv1.RegisterRuntimedServer(gs, server)
	go func() {
		<-ctx.Done()
		// Let invocations in flight answer, for a while.
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(invokeShutdownGrace):
			gs.Stop()
		}
	}()
	klog.FromContext(ctx).Info("Serving invocations", "address", lis.Addr().String())
	if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve invocations: %w", err)
	}
	return nil
}
