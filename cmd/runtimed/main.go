package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	kruntimesscheme "kruntimes.io/kruntimes/client/clientset/versioned/scheme"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/health"
	"kruntimes.io/kruntimes/runtimed/heartbeat"
	"kruntimes.io/kruntimes/runtimed/metrics"
	"kruntimes.io/kruntimes/runtimed/tasks"
	"kruntimes.io/kruntimes/runtimed/workspace"
)

// workers is how many Runs sync at once; the waits themselves run in their
// own goroutines; each sync is mostly one status write, so enough workers
// keep writes to the API in flight at high capacity.
const workers = 16

// Run starts every part of runtimed and returns when ctx ends or one fails.
func (o *options) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	loader := clientcmd.NewDefaultClientConfigLoadingRules()
	loader.ExplicitPath = o.Kubeconfig
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loader, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load the Kubernetes client configuration: %w; pass --kubeconfig or run in a Pod with a service account", err)
	}
	restConfig.UserAgent = "runtimed/" + o.PodName
	restConfig.QPS, restConfig.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	// Protobuf on the wire, as Kubernetes' own components: every event of
	// runtimed's watch is decoded, at a tenth of JSON's cost.
	restConfig.ContentType = runtime.ContentTypeProtobuf
	restConfig.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	runClient, err := versioned.NewForConfig(restConfig)
	if err != nil {
		return err
	}

	path, _ := socketPath(o.RuntimeSocket)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
		// a Pod never sees, or pays for, the Runs of others.
		externalversions.WithTweakListOptions(func(opts *metav1.ListOptions) {
			opts.FieldSelector = fields.OneTermEqualSelector(lifecycle.FieldStatusAssignedPod, o.PodName).String()
		}))
	// Events on Runs tell users what happened to their attempt.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events(o.PodNamespace)})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(kruntimesscheme.Scheme, corev1.EventSource{Component: "runtimed", Host: o.PodName})

	controller, err := tasks.New(tasks.Config{
		Runs:          runClient.KruntimesV1alpha1(),
		Informer:      factory.Kruntimes().V1alpha1().Runs(),
		RuntimeServer: runtimeServer,
		Workspace:     workspace.Root(o.WorkspaceDir),
		Pod:           pod,
		Capacity:      o.Capacity,
		Clock:         clock.RealClock{},
		Recorder:      recorder,
	})
	if err != nil {
		return err
	}
	beat := heartbeat.New(kube.CoordinationV1(), pod, clock.RealClock{})

	readiness := []health.Check{
		{Name: "runs-informer", Check: func(context.Context) error {
			if !controller.HasSynced() {
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
	liveness := []health.Check{{Name: "ping", Check: func(context.Context) error { return nil }}}

	logger.Info("Starting runtimed", "pod", klog.KRef(o.PodNamespace, o.PodName), "podUID", o.PodUID,
		"capacity", o.Capacity, "runtimeSocket", o.RuntimeSocket, "workspace", o.WorkspaceDir)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return health.Serve(ctx, o.HealthAddress, health.Handler(liveness, readiness)) })
	g.Go(func() error { beat.Run(ctx); return nil })
	factory.Start(ctx.Done())
	g.Go(func() error { controller.Run(ctx, workers); return nil })
	err = g.Wait()
	factory.Shutdown()
	return err
}

func main() {
	o := newOptions()
	fs := pflag.NewFlagSet("runtimed", pflag.ExitOnError)
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("runtimed"))
	err := o.Run(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "runtimed failed")
	}
	klog.FlushAndExit(klog.ExitFlushTimeout, exitCode(err))
}

func exitCode(err error) int {
	if err != nil {
		return 1
	}
	return 0
}
