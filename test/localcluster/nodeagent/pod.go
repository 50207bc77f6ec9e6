package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// PodDir is the directory of the Pod with uid under root. It is named by
// the first 8 characters of the UID, not all 36: a unix socket path may not
// exceed 108 bytes, and Runtime Servers listen on sockets in Pod volumes.
func PodDir(root string, uid types.UID) string {
	short := string(uid)
	if len(short) > 8 {
		short = short[:8]
	}
	return filepath.Join(root, short)
}

// VolumeDir is where the volume name of the Pod with uid lives.
func VolumeDir(root string, uid types.UID, name string) string {
	return filepath.Join(PodDir(root, uid), "vol", name)
}

// claimPodDir creates the Pod's directory and records its UID there, so
// that two Pods whose UIDs share a prefix never share a directory.
func (r *podRunner) claimPodDir() error {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	marker := filepath.Join(r.dir, "uid")
	owner, err := os.ReadFile(marker)
	switch {
	case err == nil && string(owner) != string(r.uid):
		return fmt.Errorf("pod directory %s belongs to Pod UID %s; delete that Pod first", r.dir, owner)
	case err == nil:
		return nil
	case !os.IsNotExist(err):
		return err
	}
	return os.WriteFile(marker, []byte(r.uid), 0o644)
}

// podRunner owns the processes, directory and address of one Pod.
type podRunner struct {
	agent  *Agent
	uid    types.UID
	dir    string
	logDir string // the containers' logs: under dir or Config.PodLogDir
	logger klog.Logger

	// stop is closed when the Pod must stop; graceCh carries the grace period.
	stopOnce  sync.Once
	stop      chan struct{}
	grace     time.Duration
	deleting  bool
	statusDue chan struct{}

	mu             sync.Mutex
	pod            *corev1.Pod
	podIP          string
	startTime      metav1.Time
	initContainers []*containerRunner
	containers     []*containerRunner
	initialized    bool
	setupMessage   string
	volumes        *podVolumes
}

func newPodRunner(a *Agent, pod *corev1.Pod) *podRunner {
	r := &podRunner{
		agent:     a,
		uid:       pod.UID,
		dir:       PodDir(a.cfg.PodDir, pod.UID),
		logDir:    filepath.Join(PodDir(a.cfg.PodDir, pod.UID), "logs"),
		logger:    klog.Background().WithName("nodeagent").WithValues("pod", klog.KObj(pod), "podUID", pod.UID),
		stop:      make(chan struct{}),
		statusDue: make(chan struct{}, 1),
		pod:       pod.DeepCopy(),
		startTime: metav1.Now(),
	}
	if a.cfg.PodLogDir != "" {
		r.logDir = filepath.Join(a.cfg.PodLogDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	}
	if pod.Status.StartTime != nil {
		r.startTime = *pod.Status.StartTime
	}
	for i := range pod.Spec.InitContainers {
		r.initContainers = append(r.initContainers, newContainerRunner(r, pod.Spec.InitContainers[i], true))
	}
	for i := range pod.Spec.Containers {
		r.containers = append(r.containers, newContainerRunner(r, pod.Spec.Containers[i], false))
	}
	r.observe(pod)
	return r
}

// observe records the newest Pod object and starts termination when it is
// being deleted.
func (r *podRunner) observe(pod *corev1.Pod) {
	r.mu.Lock()
	r.pod = pod.DeepCopy()
	r.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		grace := time.Duration(0)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		r.requestStop(grace, true)
	}
}

// shutdown stops the Pod's processes without deleting the Pod (agent exit or
// forced deletion).
func (r *podRunner) shutdown(grace time.Duration) { r.requestStop(grace, false) }

func (r *podRunner) requestStop(grace time.Duration, deleting bool) {
	r.stopOnce.Do(func() {
		r.grace = grace
		r.deleting = deleting
		close(r.stop)
	})
}

// event records an Event on the Pod.
func (r *podRunner) event(eventType, reason, messageFmt string, args ...any) {
	r.agent.recorder.Eventf(r.currentPod(), eventType, reason, messageFmt, args...)
}

func (r *podRunner) markStatusDirty() {
	select {
	case r.statusDue <- struct{}{}:
	default:
	}
}

func (r *podRunner) currentPod() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pod
}

// run is the Pod's lifetime on this node.
func (r *podRunner) run() {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), r.logger))
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	statusDone := make(chan struct{})
	statusCtx, stopStatus := context.WithCancel(context.Background())
	go func() {
		defer close(statusDone)
		r.statusLoop(klog.NewContext(statusCtx, r.logger))
	}()

	r.runContainers(ctx)

	// Wait for a stop request when the containers ended on their own
	// (restartPolicy Never/OnFailure) so the Pod's status stays terminal
	// until it is deleted.
	<-r.stop
	r.stopAll(r.grace)
	if r.volumes != nil {
		r.volumes.stopRefresh()
	}
	r.markStatusDirty()
	stopStatus()
	<-statusDone

	finalCtx, finalCancel := context.WithTimeout(klog.NewContext(context.Background(), r.logger), 30*time.Second)
	defer finalCancel()
	if r.deleting {
		r.writeStatus(finalCtx)
		r.agent.finalizeDeletion(finalCtx, r.currentPod())
		if err := os.RemoveAll(r.dir); err != nil {
			r.logger.Error(err, "Removing Pod directory")
		}
	}
	if r.podIP != "" {
		r.agent.ips.release(r.podIP)
	}
	r.logger.V(2).Info("Pod stopped", "deleted", r.deleting)
}

func (r *podRunner) runContainers(ctx context.Context) {
	pod := r.currentPod()
	ip, err := r.agent.ips.allocate(pod.Status.PodIP)
	if err != nil {
		r.setSetupMessage(err.Error())
		return
	}
	r.mu.Lock()
	r.podIP = ip
	r.mu.Unlock()
	r.logger.Info("Starting Pod", "podIP", ip)

	if err := r.claimPodDir(); err != nil {
		r.setSetupMessage(err.Error())
		r.markStatusDirty()
		return
	}
	// Volumes need the API (tokens, ConfigMaps); retry until they work.
	err = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		vols, err := setupVolumes(ctx, r.agent, r.currentPod(), r.dir)
		if err != nil {
			r.setSetupMessage(fmt.Sprintf("setting up volumes: %v", err))
			r.markStatusDirty()
			return false, nil
		}
		r.mu.Lock()
		r.volumes = vols
		r.setupMessage = ""
		r.mu.Unlock()
		return true, nil
	})
	if err != nil {
		return
	}
	r.markStatusDirty()

	imagesOK := true
	for _, c := range append(append([]*containerRunner{}, r.initContainers...), r.containers...) {
		if !c.resolve() {
			imagesOK = false
		}
	}
	r.markStatusDirty()
	if !imagesOK {
		r.logger.Info("Pod has containers whose image this node cannot run; leaving it Pending")
		return
	}

	policy := pod.Spec.RestartPolicy
	for _, c := range r.initContainers {
		if c.spec.RestartPolicy != nil && *c.spec.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			// A sidecar: runs for the Pod's lifetime, started in order.
			go c.supervise(ctx, corev1.RestartPolicyAlways)
			continue
		}
		initPolicy := policy
		if initPolicy == corev1.RestartPolicyAlways {
			initPolicy = corev1.RestartPolicyOnFailure
		}
		if code := c.supervise(ctx, initPolicy); code != 0 || ctx.Err() != nil {
			return
		}
	}
	r.mu.Lock()
	r.initialized = true
	r.mu.Unlock()
	r.markStatusDirty()

	var wg sync.WaitGroup
	for _, c := range r.containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.supervise(ctx, policy)
		}()
	}
	wg.Wait()
}

func (r *podRunner) setSetupMessage(msg string) {
	r.mu.Lock()
	r.setupMessage = msg
	r.mu.Unlock()
	r.logger.Info("Pod setup failed", "reason", msg)
}

// stopAll stops every running container in parallel within grace.
func (r *podRunner) stopAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range append(append([]*containerRunner{}, r.containers...), r.initContainers...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.terminate(grace)
		}()
	}
	wg.Wait()
}

// statusLoop writes the Pod's status whenever it changes until ctx is done.
func (r *podRunner) statusLoop(ctx context.Context) {
	// A periodic write catches changes that raced with a failed update.
	ticker := time.NewTicker(10 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.statusDue:
		case <-ticker.C:
		}
		r.writeStatus(ctx)
	}
}

func (r *podRunner) writeStatus(ctx context.Context) {
	pods := r.agent.client.CoreV1().Pods(r.currentPod().Namespace)
	name := r.currentPod().Name
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != r.uid {
			return nil
		}
		status := r.computeStatus(pod)
		if equality.Semantic.DeepEqual(status, &pod.Status) {
			return nil
		}
		pod.Status = *status
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		r.logger.Error(err, "Updating Pod status")
	}
}
