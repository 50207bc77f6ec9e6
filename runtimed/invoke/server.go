package invoke

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/invocation"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/dedup"
	"kruntimes.io/kruntimes/runtimed/metrics"
)

// Gate says which registration, if any, may serve an invocation: the
// function controller's Admit.
type Gate interface {
	Admit(uid types.UID, attempt int32, podUID types.UID) (registrationID string, err error)
}

// Bounder ends a context when this Pod may no longer run anything: the
// heartbeat's Bound (self-fencing on a lapsed Lease).
type Bounder interface {
	Bound(context.Context) (context.Context, context.CancelFunc)
}

// Server serves Runtimed.Invoke.
type Server struct {
	runtimedv1.UnimplementedRuntimedServer
	gate          Gate
	runtimeServer runtimev1.FunctionRuntimeClient
	// runtime names the Runtime of this Pod, for the log line.
	runtime string
	// bound, when set, stops an invocation in flight once this Pod's
	// heartbeat Lease lapses; see Bound.
	bound Bounder
	// tasks and podUID serve FollowLog; see FollowTasks.
	tasks    runtimev1.RuntimeClient
	podUID   types.UID
	stopping <-chan struct{}

	// dedup bounds invocation-ID deduplication; off while its Window is 0.
	dedup DedupConfig
	// tables holds the outcomes of caller-sent IDs, one table per
	// registration, by Run UID.
	mu        sync.Mutex
	tables    map[types.UID]*registrationTable
	lastSweep time.Time
	// budget bounds the tables together; nil without MaxPodBytes.
	budget *dedup.Budget
	// tombstones keeps the IDs the tables evicted, for all of them.
	tombstones *dedup.Tombstones
}

// DedupConfig bounds invocation-ID deduplication.
type DedupConfig struct {
	// Window is how long the outcome of an invocation with a caller-sent
	// ID is kept; 0 turns deduplication off.
	Window time.Duration
	// MaxEntries and MaxBytes bound the outcomes kept per registration;
	// the oldest go first, and one larger than MaxBytes is kept alone.
	MaxEntries int
	MaxBytes   int64
	// MaxPodBytes bounds the outcomes of every registration together (the
	// oldest of any go first); 0 leaves only the per-registration bounds.
	MaxPodBytes int64
	// MaxWaiters bounds the repeats that wait at once for one invocation
	// in flight; one more is refused (ResourceExhausted, NotStarted).
	// DefaultMaxWaiters when 0.
	MaxWaiters int
	// MaxTombstones bounds the IDs, of every registration together, whose
	// outcome was evicted within the window and whose repeat is refused
	// (AlreadyExists) rather than run again; the oldest go first.
	// DefaultMaxTombstones when 0.
	MaxTombstones int
	// Clock is the real clock when nil.
	Clock clock.PassiveClock
}

// Defaults of DedupConfig's bounds.
const (
	// DefaultMaxWaiters: a client retries an invocation a few times, not
	// hundreds; a waiter holds its stream and a goroutine, not its input.
	DefaultMaxWaiters = 8
	// DefaultMaxTombstones: 16 bytes each and the map's share, well under
	// 1 MiB, for 16 times the outcomes one registration keeps by default.
	DefaultMaxTombstones = 16 << 10
)

// registrationTable is the table of one registration: a new registration
// ID or attempt of the Run starts an empty one.
type registrationTable struct {
	attempt        int32
	registrationID string
	// table keeps the Runtime Server's answers as they came: every
	// replay wraps the same message, which nobody writes.
	table *dedup.Table[*runtimev1.InvokeFunctionResponse]
	// lastUsed is when tableOf last handed the table out.
	lastUsed time.Time
}

// Deduplicate turns invocation-ID deduplication on with cfg (off when
// cfg.Window is 0) and returns s. Call it before serving.
func (s *Server) Deduplicate(cfg DedupConfig) *Server {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MaxWaiters == 0 {
		cfg.MaxWaiters = DefaultMaxWaiters
	}
	if cfg.MaxTombstones == 0 {
		cfg.MaxTombstones = DefaultMaxTombstones
	}
	s.dedup = cfg
	s.tables = map[types.UID]*registrationTable{}
	s.tombstones = dedup.NewTombstones(cfg.MaxTombstones)
	if cfg.MaxPodBytes > 0 {
		s.budget = dedup.NewBudget(cfg.MaxPodBytes)
	}
	return s
}

// NewServer returns the invoke server of the Runtime runtime: it admits
// through gate and invokes on runtimeServer.
func NewServer(gate Gate, runtimeServer runtimev1.FunctionRuntimeClient, runtime string) *Server {
	return &Server{gate: gate, runtimeServer: runtimeServer, runtime: runtime}
}

// Bound makes every invocation in flight stop when b ends its context: the
// heartbeat's lapse, after which recovery may register the function on
// another Pod. Such an invocation ends Aborted (outcome unknown).
func (s *Server) Bound(b Bounder) *Server {
	s.bound = b
	return s
}

// Invoke implements runtimedv1.RuntimedServer. An error that carries
// runtimev1.NotStarted promises that no handler started: runtimed's own
// refusals, the Runtime Server's (which mark theirs) and a call that never
// reached the Runtime Server. DeadlineExceeded is an invocation stopped at
// its deadline; any other error is Aborted: the handler may have run.
func (s *Server) Invoke(ctx context.Context, req *runtimedv1.InvokeRequest) (*runtimedv1.InvokeResponse, error) {
	started := time.Now()
	call, legacy := functionRequest(req)
	out, replayed, err := s.invoke(ctx, req, call)
	if replayed {
		metrics.InvocationsDeduplicated.Inc()
		// The header goes out with the answer or the error alike.
		_ = grpc.SetHeader(ctx, metadata.Pairs(invocation.MetadataDeduplicated, "true"))
	}
	code := status.Code(err)
	metrics.Invocations.WithLabelValues(code.String()).Inc()
	elapsed := time.Since(started)
	// One line per invocation: who called what, and how it ended; never
	// the input, the output or a credential.
	klog.FromContext(ctx).Info("Invocation", "runtime", s.runtime, "runUID", req.GetRunUid(), "attempt", req.GetAttempt(),
		"invocationID", call.GetInvocationId(), "caller", req.GetCaller(), "code", code.String(), "duration", elapsed,
		"functionError", out.GetError().GetType(), "deduplicated", replayed)
	if err != nil {
		// An error has no field for it: the apiserver's Server-Timing
		// reads runtimed's share from the header.
		_ = grpc.SetHeader(ctx, metadata.Pairs(invocation.MetadataRuntimedNanos, strconv.FormatInt(elapsed.Nanoseconds(), 10)))
		return nil, err
	}
	if legacy {
		return legacyResponse(out, elapsed), nil
	}
	return &runtimedv1.InvokeResponse{Result: out, RuntimedNanos: elapsed.Nanoseconds()}, nil
}

// functionRequest is what req asks of the Runtime Server, run_uid set;
// legacy says req came in the fields of the release before (no
// invocation), to be answered in that release's fields.
func functionRequest(req *runtimedv1.InvokeRequest) (call *runtimev1.InvokeFunctionRequest, legacy bool) {
	call = req.GetInvocation()
	if call == nil {
		legacy = true
		call = &runtimev1.InvokeFunctionRequest{InvocationId: req.GetInvocationId(), Input: req.GetInput(),
			ContentType: req.GetContentType(), TimeoutMillis: req.GetTimeoutMillis()}
		req.Input = nil
	}
	call.RunUid = req.GetRunUid()
	return call, legacy
}

// legacyResponse answers an apiserver of the release before, which reads
// the Runtime Server's answer from InvokeResponse's own fields.
func legacyResponse(out *runtimev1.InvokeFunctionResponse, elapsed time.Duration) *runtimedv1.InvokeResponse {
	resp := &runtimedv1.InvokeResponse{
		InvocationId:    out.GetInvocationId(),
		Output:          out.GetOutput(),
		Outputs:         out.GetOutputs(),
		Stdout:          out.GetStdout(),
		Stderr:          out.GetStderr(),
		StdoutTruncated: out.GetStdoutTruncated(),
		StderrTruncated: out.GetStderrTruncated(),
		DurationNanos:   out.GetDurationNanos(),
		ContentType:     out.GetContentType(),
		WorkerWarm:      out.GetWorkerWarm(),
		RuntimedNanos:   elapsed.Nanoseconds(),
	}
	if e := out.GetError(); e != nil {
		resp.Error = &runtimedv1.FunctionError{Type: e.GetType(), Message: e.GetMessage()}
	}
	return resp
}

func (s *Server) invoke(ctx context.Context, req *runtimedv1.InvokeRequest, call *runtimev1.InvokeFunctionRequest) (out *runtimev1.InvokeFunctionResponse, replayed bool, err error) {
	if err := invocation.CheckID(call.GetInvocationId()); err != nil {
		return nil, false, runtimev1.NotStartedError(codes.InvalidArgument, "invocation_id: %v", err)
	}
	switch {
	case len(call.GetInput()) > invocation.MaxInputBytes:
		return nil, false, runtimev1.NotStartedError(codes.InvalidArgument, "input has %d bytes; at most %d are allowed", len(call.GetInput()), invocation.MaxInputBytes)
	case call.GetTimeoutMillis() < 0:
		return nil, false, runtimev1.NotStartedError(codes.InvalidArgument, "timeout_millis must not be negative")
	}
	id, err := s.gate.Admit(types.UID(req.GetRunUid()), req.GetAttempt(), types.UID(req.GetPodUid()))
	if err != nil {
		return nil, false, runtimev1.NotStartedError(codes.FailedPrecondition, "%s", err.Error())
	}
	call.RegistrationId = id
	if !req.GetCallerSentId() || s.dedup.Window <= 0 {
		out, err := s.call(ctx, call)
		return out, false, err
	}
	table := s.tableOf(types.UID(req.GetRunUid()), req.GetAttempt(), id)
	// Keyed by the caller too: another identity that sends the same ID
	// runs its own invocation rather than reading this caller's outcome.
	// An ID holds no control character, so the NUL splits the key alone.
	found, err := table.Find(req.GetCaller(), call.GetInvocationId())
	switch {
	case errors.Is(err, dedup.ErrTooManyWaiters):
		metrics.InvocationsRefused.WithLabelValues(metrics.ReasonTooManyWaiters).Inc()
		return nil, false, runtimev1.NotStartedError(codes.ResourceExhausted,
			"%d repeats of invocation ID %q already wait for the one in flight; send it again once that one has answered", s.dedup.MaxWaiters, call.GetInvocationId())
	case errors.Is(err, dedup.ErrEvicted):
		// Not NotStarted: the first may have run, and a retry with this
		// ID would be refused the same way.
		return nil, false, status.Errorf(codes.AlreadyExists,
			"the outcome of invocation ID %q is no longer known: it ran, or may have, and its record was evicted to make room for newer ones before its window ended; "+
				"it was not run again: send a new invocation ID to run it again", call.GetInvocationId())
	case found.Replayed:
		return found.Value, true, found.Err
	case found.Wait != nil:
		// A waiter never runs its own: holding its input while it waits
		// is what would make a flood of repeats cost memory.
		call.Input = nil
		out, err := found.Wait.Wait(ctx)
		if err != nil {
			// Gave up waiting for the invocation in flight with this ID,
			// which started: not NotStarted.
			return nil, false, status.Errorf(status.FromContextError(err).Code(),
				"an invocation with ID %q is in flight; its outcome did not arrive in time: %v", call.GetInvocationId(), err)
		}
		// An outcome not recorded is a refusal before the handler started:
		// this repeat did not run either, and may be sent again.
		return out.Value, out.Recorded, out.Err
	}
	// The outcome is recorded for a retry, so the invocation runs to its
	// end even when this caller goes away first; its deadline stays.
	runCtx := context.WithoutCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithDeadline(runCtx, deadline)
		defer cancel()
	}
	out, err = s.call(runCtx, call)
	// Everything but a refusal before the handler started is recorded:
	// keeping the uncertain outcomes too is what makes a repeat run at
	// most once.
	found.Run.Finish(out, err, err == nil || !runtimev1.IsNotStarted(err))
	s.sweep()
	return out, false, err
}

// call asks the Runtime Server for call, whose registration ID is set.
func (s *Server) call(ctx context.Context, call *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
	// The content type goes on as it came: application/json says the
	// apiserver validated the input, so the Runtime Server does not scan it.
	callCtx := ctx
	if s.bound != nil {
		var cancel context.CancelFunc
		callCtx, cancel = s.bound.Bound(ctx)
		defer cancel()
	}
	var reached peer.Peer
	out, err := s.runtimeServer.InvokeFunction(callCtx, call, grpc.Peer(&reached))
	if err != nil {
		err = invokeError(err, reached.Addr != nil)
		if ctx.Err() == nil && callCtx.Err() != nil && !runtimev1.IsNotStarted(err) {
			// The bound stopped it, not the caller.
			return nil, status.Errorf(codes.Aborted, "the invocation was stopped because %v; its outcome is unknown", context.Cause(callCtx))
		}
		return nil, err
	}
	return out, nil
}

// entryOverhead is what one recorded outcome costs beyond its bytes: the
// entry, its list element and map slot, roughly.
const entryOverhead = 256

// outcomeSize counts the bytes a recorded outcome holds.
func outcomeSize(resp *runtimev1.InvokeFunctionResponse, err error) int64 {
	n := int64(entryOverhead)
	if resp != nil {
		n += int64(proto.Size(resp))
	}
	if err != nil {
		n += int64(len(status.Convert(err).Message()))
	}
	return n
}

// tableOf returns the table of the registration id at attempt of the Run
// uid: an empty one when the Run had none, or another registration's.
func (s *Server) tableOf(uid types.UID, attempt int32, id string) *dedup.Table[*runtimev1.InvokeFunctionResponse] {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tables[uid]
	if t == nil || t.attempt != attempt || t.registrationID != id {
		if t != nil {
			// Its outcomes are never replayed again: give their bytes back.
			t.table.Drop()
		}
		t = &registrationTable{attempt: attempt, registrationID: id, table: dedup.New(dedup.Config{
			Window: s.dedup.Window, MaxEntries: s.dedup.MaxEntries, MaxBytes: s.dedup.MaxBytes, Clock: s.dedup.Clock,
			Budget: s.budget, MaxWaiters: s.dedup.MaxWaiters, Tombstones: s.tombstones,
		}, outcomeSize)}
		s.tables[uid] = t
	}
	t.lastUsed = s.dedup.Clock.Now()
	return t.table
}

// sweep drops, at most once per window, the tables that hold nothing any
// more and were not handed out for a window: those of Runs released, or
// idle.
func (s *Server) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.dedup.Clock.Now()
	if now.Sub(s.lastSweep) < s.dedup.Window {
		return
	}
	s.lastSweep = now
	for uid, t := range s.tables {
		if now.Sub(t.lastUsed) >= s.dedup.Window && t.table.Len() == 0 {
			delete(s.tables, uid)
		}
	}
}

// invokeError maps the Runtime Server's answer to what the apiserver makes
// of it; reached says the call got to the Runtime Server. Only an explicit
// NotStarted, or a call that never left, says that nothing ran: a code
// alone does not (a custom Runtime Server may answer ResourceExhausted or
// FailedPrecondition after its handler ran).
func invokeError(err error, reached bool) error {
	st := status.Convert(err)
	switch {
	case runtimev1.IsNotStarted(err):
		return err
	case !reached:
		return runtimev1.NotStartedError(st.Code(), "the Runtime Server was not reached: %s", st.Message())
	case st.Code() == codes.DeadlineExceeded:
		return err
	case st.Code() == codes.Canceled && errors.Is(err, context.Canceled):
		// The apiserver went away: nobody reads this answer.
		return err
	}
	// Any other error, and Unavailable, which is also how a connection that
	// broke mid-call ends: dispatched, outcome unknown.
	return status.Errorf(codes.Aborted, "the invocation was dispatched and its outcome is unknown (%s): %s", st.Code(), st.Message())
}
