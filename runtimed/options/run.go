package options

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	kruntimesscheme "kruntimes.io/kruntimes/client/clientset/versioned/scheme"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	runlisters "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
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
)

// workers is how many Runs each controller syncs at once; task waits run in
// their own goroutines, and each sync is mostly one status write, so enough
// workers keep writes to the API in flight at high capacity.
const workers = 16

// invokeShutdownGrace is how long invocations in flight may finish when
// runtimed stops.
const invokeShutdownGrace = 5 * time.Second

// Run starts every part of runtimed and returns when one fails, or after
// ctx ends (SIGTERM: the Pod is deleted gracefully) and runtimed gave back
// the functions of this Pod for relocation. It releases the Config.
func (c *Config) Run(signalCtx context.Context) error {
	defer c.close()
	logger := klog.FromContext(signalCtx)
	// Everything runs on until the functions are given back: the heartbeat
	// (so recovery waits for the release instead of fencing), the invoke
	// server (refusing, so callers get 503 with Retry-After), the informer.
	ctx, stopAll := context.WithCancel(context.WithoutCancel(signalCtx))
	defer stopAll()
	if c.MaxProcs > 0 && os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(c.MaxProcs)
	}
	runtimeServer := runtimev1.NewRuntimeClient(c.RuntimeServer)
	functionRuntime := runtimev1.NewFunctionRuntimeClient(c.RuntimeServer)

	metrics.Register()
	pod := c.Pod
	factory := externalversions.NewSharedInformerFactoryWithOptions(c.Kruntimes, 0,
		externalversions.WithNamespace(pod.Namespace),
		// Only this Pod's Runs: the apiserver indexes status.assignedPod, so
		// a Pod never sees, or pays for, the Runs of others; and only this
		// incarnation's, by UID, which the runtimed restriction requires.
		externalversions.WithTweakListOptions(func(opts *metav1.ListOptions) {
			opts.FieldSelector = fields.SelectorFromSet(fields.Set{
				lifecycle.FieldStatusAssignedPod:    pod.Name,
				lifecycle.FieldStatusAssignedPodUID: string(pod.UID),
			}).String()
		}))
	// Events on Runs tell users what happened to their attempt.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Kube.CoreV1().Events(pod.Namespace)})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(kruntimesscheme.Scheme, corev1.EventSource{Component: "runtimed", Host: pod.Name})

	table, err := slots.New(c.Capacity)
	if err != nil {
		return err
	}
	runInformer := factory.Kruntimes().V1alpha1().Runs()
	beat := heartbeat.New(c.Kube.CoordinationV1(), pod, clock.RealClock{})
	taskController, err := tasks.New(tasks.Config{
		Runs:          c.Kruntimes.KruntimesV1alpha1(),
		Informer:      runInformer,
		RuntimeServer: runtimeServer,
		Workspace:     c.Workspace,
		Pod:           pod,
		Slots:         table,
		Clock:         clock.RealClock{},
		Recorder:      recorder,
		Heartbeat:     beat,
		Secrets:       c.Kube.CoreV1(),
	})
	if err != nil {
		return err
	}
	functionController, err := functions.New(functions.Config{
		Runs:          c.Kruntimes.KruntimesV1alpha1(),
		Informer:      runInformer,
		RuntimeServer: functionRuntime,
		Workspace:     c.Workspace,
		Pod:           pod,
		Slots:         table,
		Clock:         clock.RealClock{},
		Recorder:      recorder,
		Heartbeat:     beat,
		Secrets:       c.Kube.CoreV1(),
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
				return fmt.Errorf("the Health RPC over %s failed: %w", c.RuntimeSocket, err)
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

	logger.Info("Starting runtimed", "pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID,
		"capacity", c.Capacity, "runtimeSocket", c.RuntimeSocket, "workspace", string(c.Workspace))
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		select {
		case <-ctx.Done():
			return nil // a part failed
		case <-signalCtx.Done():
		}
		// Claim nothing more, then give back every function, bounded by
		// less than the Pod's termination grace.
		logger.Info("Shutting down: relocating this Pod's functions", "drain", c.Shutdown.Drain, "timeout", c.Shutdown.Timeout)
		table.Close()
		relocateCtx, cancel := context.WithTimeout(ctx, c.Shutdown.Timeout)
		functionController.Relocate(relocateCtx, c.Shutdown.Drain)
		cancel()
		stopAll()
		return nil
	})
	// With mutual TLS, /metrics asks a scraper's client certificate; the
	// health port stays plain HTTP for the kubelet's probes.
	g.Go(func() error {
		return health.Serve(ctx, c.HealthListener, health.Handler(liveness, readiness, c.Invoke == nil))
	})
	if c.Invoke != nil {
		g.Go(func() error {
			return health.Serve(ctx, tls.NewListener(c.Invoke.MetricsListener, c.Invoke.MetricsTLS), health.MetricsHandler())
		})
	}
	g.Go(func() error { beat.Run(ctx); return nil })
	if c.Invoke != nil {
		server := invoke.NewServer(functionController, functionRuntime, c.RuntimeName).FollowTasks(ctx, runtimeServer, pod.UID).Bound(beat).
			Deduplicate(c.Invoke.Dedup)
		g.Go(func() error { return c.Invoke.serve(ctx, server) })
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
		sweepWorkspaces(ctx, c.Workspace, runInformer.Lister(), pod)
		g.Go(func() error { taskController.Run(ctx, workers); return nil })
		g.Go(func() error { functionController.Run(ctx, workers); return nil })
		return nil
	})
	err = g.Wait()
	factory.Shutdown()
	return err
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

// serve serves the apiserver's invocations until ctx ends.
func (c *InvokeConfig) serve(ctx context.Context, server *invoke.Server) error {
	gs := grpc.NewServer(append(transport.RuntimedServerOptions(), grpc.Creds(credentials.NewTLS(c.TLS)),
		grpc.MaxConcurrentStreams(c.MaxConcurrentStreams))...)
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
	klog.FromContext(ctx).Info("Serving invocations", "address", c.Listener.Addr().String())
	if err := gs.Serve(c.Listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve invocations: %w", err)
	}
	return nil
}
