package run

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runlog"
	"kruntimes.io/kruntimes/apiserver/logfollow"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
)

// PodRouter finds the runtimed of a Runtime Pod from memory, as Router
// does for a function Run: runs/log follows a running task through it. Its
// errors are API errors.
type PodRouter interface {
	// Runtimed returns the client of the runtimed in Pod namespace/pod,
	// whose UID must be podUID.
	Runtimed(namespace, pod string, podUID types.UID) (runtimedclient.Interface, error)
}

// LogRouter is what runs/log follows a Run through, as pods/log reaches a
// kubelet through a ConnectionInfoGetter: the runtimed of the Run's Pod,
// and the change signal a follow waits on until the Run is there to follow.
type LogRouter interface {
	PodRouter
	RouteWaiter
}

// followStartTimeout bounds how long a follow of an attempt that has not
// written anything yet waits for its first byte or its end, unless the
// request's own deadline is sooner: the generic request timeout (60 s),
// which a long-running log request is otherwise exempt from.
const followStartTimeout = 60 * time.Second

// follower is one follow of one attempt: it writes what the attempt wrote
// from offset on, as Render would, live.
type follower struct {
	out     *runlog.LimitWriter
	flusher http.Flusher
	lw      *runlog.LiveWriter
	// tail, while set, gathers the last tailLines lines of what was
	// written so far, within runlog.MaxTailBytes: they are written once
	// the follow caught up.
	tail   *runlog.TailBuffer
	offset int64
	// wrote says a byte arrived: from then on the follow waits as long as
	// the attempt runs.
	wrote bool
	// live says a function's runtimed answered: from then on the follow
	// waits as long as the Run does not end.
	live bool
}

// chunks writes consecutive chunks that start at start after skipped
// dropped bytes, and says whether the follow is over (limitBytes).
func (f *follower) chunks(skipped, start int64, chunks []runlog.Chunk) (bool, error) {
	if skipped > 0 || len(chunks) > 0 {
		f.wrote = true
	}
	t := time.Now()
	if len(chunks) > 0 {
		t = chunks[0].Time
	}
	if err := f.lw.Skipped(skipped, t); err != nil {
		return f.ended(err)
	}
	f.offset = start
	for _, c := range chunks {
		if err := f.lw.Chunk(c); err != nil {
			return f.ended(err)
		}
		f.offset += int64(len(c.Data))
	}
	return false, nil
}

// caughtUp ends the tail gathering: the last tailLines lines go out, and
// the rest goes out as it comes.
func (f *follower) caughtUp() (bool, error) {
	if f.tail == nil {
		return false, nil
	}
	b := f.tail.Bytes()
	f.tail = nil
	f.lw.SetWriter(f.out)
	f.lw.Rewritten(b)
	if _, err := f.out.Write(b); err != nil {
		return f.ended(err)
	}
	return false, nil
}

func (f *follower) flush() {
	if f.flusher != nil {
		f.flusher.Flush()
	}
}

func (f *follower) ended(err error) (bool, error) {
	if errors.Is(err, runlog.ErrLimit) {
		return true, nil
	}
	return true, err
}

// startFollow answers 200 to a follow with o's options, and returns the
// follower that writes the rest of the answer.
func startFollow(w http.ResponseWriter, o *kruntimes.RunLogOptions) *follower {
	f := &follower{out: &runlog.LimitWriter{W: w, Left: -1}}
	if o.LimitBytes != nil {
		f.out.Left = *o.LimitBytes
	}
	f.flusher, _ = w.(http.Flusher)
	f.lw = runlog.NewLiveWriter(f.out, runlog.RenderOptions{Stream: runlog.Stream(o.Stream), Timestamps: o.Timestamps})
	if o.TailLines != nil {
		f.tail = runlog.NewTailBuffer(*o.TailLines, runlog.MaxTailBytes)
		f.lw.SetWriter(f.tail)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	f.flush()
	return f
}

// follow streams attempt of run as it is written: from the owning runtimed
// while it runs, from the kept log once it ended (from the offset reached,
// so nothing is lost or repeated when the attempt ends mid-follow). The
// Run is read from this server's watch cache, again at each change the
// router tells of, and the owner's runtimed found through the router's
// Pods: no Kubernetes API call per follow.
func (r *LogREST) follow(ctx context.Context, w http.ResponseWriter, namespace string, run *kruntimes.Run, attempt int32, o *kruntimes.RunLogOptions) {
	logger := klog.FromContext(ctx).WithValues("run", klog.KRef(namespace, run.Name), "attempt", attempt)
	f := startFollow(w, o)
	ctx = genericapirequest.WithNamespace(ctx, namespace)
	loop := r.followLoop(namespace, run.Name, func() bool { return f.wrote })
	loop.Run(ctx, func(first bool) logfollow.Next {
		if !first {
			if run = r.reread(ctx, run, logger); run == nil {
				return logfollow.Done
			}
		}
		switch {
		case attempt < run.Status.Attempt || (attempt == run.Status.Attempt && lifecycle.IsTerminal(run.Status.Phase)):
			// The attempt ended, and its log was kept before its outcome
			// was written.
			r.followKept(ctx, f, namespace, run, attempt, logger)
			return logfollow.Done
		case attempt != run.Status.Attempt || run.Status.Phase != lifecycle.Running || run.Status.AssignedPod == "":
			return logfollow.WaitForChange
		}
		client, err := r.router.Runtimed(namespace, run.Status.AssignedPod, run.Status.AssignedPodUID)
		if err != nil {
			logger.V(4).Info("The runtimed of a followed attempt is not reachable yet", "err", err)
			return logfollow.Retry
		}
		done, err := followLive(ctx, f, client, runtimedclient.LogKey{RunUID: run.UID, Attempt: attempt, PodUID: run.Status.AssignedPodUID})
		if done {
			return logfollow.Done
		}
		if err != nil {
			logger.V(4).Info("Following the runtimed of an attempt failed; trying again", "err", err)
		}
		return logfollow.Retry
	})
}

// followLoop is the loop of a follow of the Run namespace/name, which ends
// empty after followStartTimeout unless started says it wrote or went live.
func (r *LogREST) followLoop(namespace, name string, started func() bool) *logfollow.Loop {
	return &logfollow.Loop{Changes: r.router, Namespace: namespace, Name: name, StartBy: time.Now().Add(followStartTimeout), Started: started}
}

// reread reads run again from the watch cache. It returns nil when the
// follow is over: the Run is gone (deleted, or its name taken by another
// Run).
func (r *LogREST) reread(ctx context.Context, run *kruntimes.Run, logger klog.Logger) *kruntimes.Run {
	obj, err := r.runs.Get(ctx, run.Name, &metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			logger.Error(err, "A follow could not read its Run")
		}
		return nil
	}
	if obj.(*kruntimes.Run).UID != run.UID {
		return nil // deleted, and the name taken by another Run
	}
	return obj.(*kruntimes.Run)
}

// followLive follows key on its runtimed from f.offset, until the attempt
// ends (done) or the stream fails (err, to try again). A function's
// registration that ended is not done: its Run may register again.
func followLive(ctx context.Context, f *follower, client runtimedclient.Interface, key runtimedclient.LogKey) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := f.offset
	stream, err := client.FollowLog(ctx, key, from)
	if err != nil {
		return false, err
	}
	for first := true; ; first = false {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// The attempt ended and this was its last byte.
			if done, err := f.caughtUp(); done {
				return true, err
			}
			f.flush()
			return !key.Function, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return true, nil // the client went away
			}
			if errors.Is(err, runtimedclient.ErrLogPastEnd) {
				if key.Function {
					// The Runtime Server restarted and registered the
					// function again: its log starts anew.
					f.offset = 0
					return false, err
				}
				return true, err // never happens to a consistent follower
			}
			return false, err
		}
		if key.Function {
			f.live = true
			if first && from == 0 {
				// Bytes a function wrote before the follow and no longer
				// kept were never this follower's to miss.
				resp.SkippedBytes = 0
			}
		}
		end := resp.Offset
		for _, c := range resp.Chunks {
			end += int64(len(c.Data))
		}
		if done, err := f.chunks(resp.SkippedBytes, resp.Offset, resp.Chunks); done {
			return true, err
		}
		if end >= resp.Written {
			if done, err := f.caughtUp(); done {
				return true, err
			}
		}
		f.flush()
	}
}

// followFunction streams what the function Run's invocations write, from
// the runtimed that holds its registration, attempt after attempt, until
// the Run ends or the client goes away. Nothing of it is kept: a follow
// starts with what the registration still holds (the Runtime Server keeps
// a bounded tail of its invocations' output) and goes on live.
func (r *LogREST) followFunction(ctx context.Context, w http.ResponseWriter, namespace string, run *kruntimes.Run, o *kruntimes.RunLogOptions) {
	logger := klog.FromContext(ctx).WithValues("run", klog.KRef(namespace, run.Name))
	f := startFollow(w, o)
	f.lw.ForFunction(runlog.FunctionMarker)
	defer func() {
		_, _ = f.caughtUp()
		f.flush()
	}()
	ctx = genericapirequest.WithNamespace(ctx, namespace)
	var attempt int32
	loop := r.followLoop(namespace, run.Name, func() bool { return f.live || f.wrote })
	loop.Run(ctx, func(first bool) logfollow.Next {
		if !first {
			if run = r.reread(ctx, run, logger); run == nil {
				return logfollow.Done
			}
		}
		switch {
		case lifecycle.IsTerminal(run.Status.Phase):
			return logfollow.Done
		case run.Status.Phase != lifecycle.Ready || run.Status.AssignedPod == "":
			return logfollow.WaitForChange
		}
		if run.Status.Attempt != attempt {
			// Another registration: its log starts at 0.
			attempt, f.offset = run.Status.Attempt, 0
		}
		client, err := r.router.Runtimed(namespace, run.Status.AssignedPod, run.Status.AssignedPodUID)
		if err != nil {
			logger.V(4).Info("The runtimed of a followed function is not reachable yet", "err", err)
			return logfollow.Retry
		}
		done, err := followLive(ctx, f, client, runtimedclient.LogKey{RunUID: run.UID, Attempt: attempt, PodUID: run.Status.AssignedPodUID, Function: true})
		switch {
		case done:
			return logfollow.Done
		case errors.Is(err, runtimedclient.ErrLogUnsupported):
			logger.V(2).Info("The Runtime Server of a followed function does not serve function logs", "err", err)
			return logfollow.Done
		case err != nil:
			logger.V(4).Info("Following the runtimed of a function failed; trying again", "err", err)
		}
		return logfollow.Retry
	})
}

// followKept writes the ended attempt's kept log from f.offset on.
func (r *LogREST) followKept(ctx context.Context, f *follower, namespace string, run *kruntimes.Run, attempt int32, logger klog.Logger) {
	record, err := r.logs.Get(ctx, namespace, run.Name, run.UID, attempt)
	if err != nil {
		logger.Error(err, "A follow could not read the kept log of its attempt")
		return
	}
	if record != nil {
		l := logOf(record)
		for f.offset < l.Written() {
			chunks, start, skipped := l.From(f.offset)
			if done, _ := f.chunks(skipped, start, chunks); done {
				f.flush()
				return
			}
		}
	}
	_, _ = f.caughtUp()
	f.flush()
}

// followAttempt is the attempt a follow of run follows: the one asked for,
// or the latest, or the first when none started yet.
func followAttempt(run *kruntimes.Run, o *kruntimes.RunLogOptions) int32 {
	if o.Attempt != nil {
		return *o.Attempt
	}
	return max(run.Status.Attempt, 1)
}

// LongRunning extends check with follows of runs/log and with runs/files:
// a follow lasts as long as its task, a file transfer as long as its size, and the generic request timeout (60 s) must not cut
// it. kube-apiserver treats every log subresource so; k8s.io/apiserver's
// default check only watches.
func LongRunning(check genericapirequest.LongRunningRequestCheck) genericapirequest.LongRunningRequestCheck {
	return func(r *http.Request, info *genericapirequest.RequestInfo) bool {
		// A sandbox's file lasts as long as its bytes take to move.
		if info != nil && info.IsResourceRequest && info.Resource == "runs" && info.Subresource == "files" {
			return true
		}
		if info != nil && info.IsResourceRequest && info.Resource == "runs" && info.Subresource == "log" {
			if follow, err := strconv.ParseBool(r.URL.Query().Get("follow")); err == nil && follow {
				return true
			}
		}
		return check != nil && check(r, info)
	}
}
