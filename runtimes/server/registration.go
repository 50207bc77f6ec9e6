package server

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/runlog"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimes/language"
)

// Bounds of registration fields that are not covered by the invoke contract.
const (
	maxDigestBytes  = 256
	maxHandlerBytes = 1024
)

// functionLogBytes bounds what a registration keeps of its invocations'
// output for followers: two invocations' whole stdout and stderr, so that
// a follower who connects right after an invocation, or reconnects, sees
// it, and memory per registration stays bounded however chatty it is.
const functionLogBytes = 4 * language.MaxInvocationLogBytes

var (
	errGenerationEnded = errors.New("the registration generation ended")
	errUnregistered    = errors.New("the registration was unregistered")
)

// registration is one generation of a function registration: a Run UID at
// one attempt. A higher attempt replaces it with a new generation.
type registration struct {
	runUID       string
	id           string
	attempt      int64
	digest       string
	idleTimeout  time.Duration
	registeredAt time.Time
	// workingDir and handler are the request's: ReadFile and WriteFile
	// serve the working directory of a sandbox's handler.
	workingDir, handler string

	// ctx ends with the generation; in-flight invocations derive from it so
	// that unregistering or superseding interrupts them.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// loaded is closed once loading finished, successfully or not.
	loaded chan struct{}
	// slot holds a token while an invocation is in flight: one at a time,
	// and no queue.
	slot chan struct{}
	// gone is closed once UnregisterFunction released the generation.
	gone chan struct{}
	// log keeps the tail of what the generation's invocations wrote, for
	// FollowFunctionLog; it goes with the generation.
	log *runlog.Recorder
	// commands keeps the output of the background commands the function
	// starts, for FollowFunctionLog with a command_id; it goes with the
	// generation too.
	commands *commandLogs
	// scratch holds the generation's HOME and TMPDIR; dropScratch removes
	// it once its function is closed.
	scratch     string
	dropScratch func(dir string) error

	mu           sync.Mutex
	state        runtimev1.FunctionState
	fn           language.Function
	fatalError   string
	ended        bool
	draining     bool
	inFlight     int32
	lastActivity time.Time
}

// shutdown ends the generation: interrupts its invocation and releases the
// function. It is idempotent.
func (r *registration) shutdown() {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return
	}
	r.ended = true
	fn := r.fn
	r.mu.Unlock()
	r.cancel(errGenerationEnded)
	if fn != nil {
		fn.Close()
		r.removeScratch()
		return
	}
	// A function still loading is closed by load before loaded is closed;
	// one that failed to load has no process left.
	go func() {
		<-r.loaded
		r.removeScratch()
	}()
}

func (r *registration) removeScratch() {
	if r.scratch == "" {
		return
	}
	if err := r.dropScratch(r.scratch); err != nil {
		klog.Background().Error(err, "Could not remove a registration's HOME and TMPDIR", "runUID", r.runUID, "dir", r.scratch)
	}
}

func (r *registration) statusLocked() *runtimev1.RegistrationStatus {
	st := &runtimev1.RegistrationStatus{
		RunUid:               r.runUID,
		RegistrationId:       r.id,
		RegistrationAttempt:  r.attempt,
		State:                r.state,
		InFlight:             r.inFlight,
		LastActivityUnixNano: r.lastActivity.UnixNano(),
		FatalError:           r.fatalError,
		RegisteredUnixNano:   r.registeredAt.UnixNano(),
	}
	if r.state == runtimev1.FunctionState_FUNCTION_STATE_READY && r.fn != nil {
		if err := r.fn.Failure(); err != nil {
			st.State = runtimev1.FunctionState_FUNCTION_STATE_FAILED
			st.FatalError = truncateMessage(err.Error())
		}
	}
	if r.draining {
		st.State = runtimev1.FunctionState_FUNCTION_STATE_DRAINING
	}
	if r.idleTimeout > 0 && r.inFlight == 0 && st.State == runtimev1.FunctionState_FUNCTION_STATE_READY {
		st.IdleDeadlineUnixNano = r.lastActivity.Add(r.idleTimeout).UnixNano()
	}
	return st
}

func (r *registration) status() *runtimev1.RegistrationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statusLocked()
}

func validateRunUID(uid string) error {
	if uid == "" || len(uid) > invocation.MaxIDBytes {
		return status.Errorf(codes.InvalidArgument, "run_uid must be 1..%d bytes: pass the Run's metadata.uid", invocation.MaxIDBytes)
	}
	return nil
}

// RegisterFunction implements runtimev1.FunctionRuntimeServer.
func (s *Server) RegisterFunction(ctx context.Context, req *runtimev1.RegisterFunctionRequest) (*runtimev1.RegistrationStatus, error) {
	if err := validateRunUID(req.GetRunUid()); err != nil {
		return nil, err
	}
	switch {
	case req.GetRegistrationAttempt() < 1:
		return nil, status.Error(codes.InvalidArgument, "registration_attempt must be >= 1: pass Run.status.attempt")
	case req.GetRegistrationDigest() == "" || len(req.GetRegistrationDigest()) > maxDigestBytes:
		return nil, status.Errorf(codes.InvalidArgument, "registration_digest must be 1..%d bytes", maxDigestBytes)
	case !filepath.IsAbs(req.GetWorkingDir()):
		return nil, status.Errorf(codes.InvalidArgument, "working_dir %q must be an absolute path", req.GetWorkingDir())
	case req.GetHandler() == "" || len(req.GetHandler()) > maxHandlerBytes:
		return nil, status.Errorf(codes.InvalidArgument, "handler must be 1..%d bytes", maxHandlerBytes)
	case req.GetIdleTimeoutSeconds() < 0:
		return nil, status.Error(codes.InvalidArgument, "idle_timeout_seconds must not be negative")
	}
	env, err := envPairs(req.GetEnv())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	uid, attempt := req.GetRunUid(), req.GetRegistrationAttempt()
	logger := klog.FromContext(ctx).WithValues("runUID", uid, "attempt", attempt)
	scratch, scratchEnv, err := s.newScratch("function-")
	if err != nil {
		return nil, status.Errorf(codes.Internal, "create the function's HOME and TMPDIR: %v", err)
	}
	// Removed at once unless a new generation takes it below.
	taken := false
	defer func() {
		if !taken {
			_ = s.dropScratch(scratch)
		}
	}()

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "the Runtime Server is shutting down; retry on another Pod")
	}
	var superseded *registration
	if cur, ok := s.regs[uid]; ok {
		switch {
		case attempt == cur.attempt && req.GetRegistrationDigest() == cur.digest:
			s.mu.Unlock()
			return s.awaitLoaded(ctx, cur)
		case attempt == cur.attempt:
			s.mu.Unlock()
			return nil, status.Errorf(codes.AlreadyExists, "Run %s attempt %d is already registered with a different configuration; register a higher attempt to replace it", uid, attempt)
		case attempt < cur.attempt:
			s.mu.Unlock()
			return nil, status.Errorf(codes.FailedPrecondition, "Run %s is registered at attempt %d; attempt %d is stale and must not run", uid, cur.attempt, attempt)
		}
		superseded = cur
	} else if retired, ok := s.retired[uid]; ok && attempt <= retired {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "Run %s was already unregistered at attempt %d; attempt %d is stale and must not run", uid, retired, attempt)
	}
	now := s.opts.Clock.Now()
	regCtx, cancel := context.WithCancelCause(context.Background())
	reg := &registration{
		runUID:       uid,
		id:           randomID(registrationIDPrefix, registrationIDRandomBytes),
		attempt:      attempt,
		digest:       req.GetRegistrationDigest(),
		idleTimeout:  time.Duration(req.GetIdleTimeoutSeconds()) * time.Second,
		registeredAt: now,
		workingDir:   req.GetWorkingDir(),
		handler:      req.GetHandler(),
		ctx:          regCtx,
		cancel:       cancel,
		loaded:       make(chan struct{}),
		slot:         make(chan struct{}, 1),
		gone:         make(chan struct{}),
		log:          runlog.NewTailRecorder(functionLogBytes, s.opts.Clock.Now),
		commands:     newCommandLogs(s.opts.Clock.Now),
		state:        runtimev1.FunctionState_FUNCTION_STATE_REGISTERING,
		lastActivity: now,
		scratch:      scratch,
		dropScratch:  s.dropScratch,
	}
	taken = true
	s.regs[uid] = reg
	s.mu.Unlock()

	if superseded != nil {
		logger.Info("Superseding registration", "oldAttempt", superseded.attempt)
		superseded.shutdown()
	}
	spec := language.FunctionSpec{RunUID: uid, WorkingDir: req.GetWorkingDir(), Handler: req.GetHandler(), Env: s.env(append(scratchEnv, env...)...),
		Commands: reg.commands}
	// Loading outlives this call on purpose: a caller that times out retries
	// with the same attempt and digest and waits for the same load.
	go s.load(klog.NewContext(context.Background(), logger), reg, spec)
	return s.awaitLoaded(ctx, reg)
}

func (s *Server) load(ctx context.Context, reg *registration, spec language.FunctionSpec) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, s.opts.RegisterTimeout)
	defer cancel()
	stop := context.AfterFunc(reg.ctx, cancel)
	defer stop()
	fn, err := s.opts.Functions.LoadFunction(ctx, spec)

	reg.mu.Lock()
	defer close(reg.loaded)
	defer reg.mu.Unlock()
	if reg.ended {
		if fn != nil {
			fn.Close()
		}
		// Callers still waiting must not read REGISTERING as "try again".
		reg.state = runtimev1.FunctionState_FUNCTION_STATE_FAILED
		reg.fatalError = "the registration was unregistered or superseded while it was loading"
		return
	}
	if err != nil {
		reg.state = runtimev1.FunctionState_FUNCTION_STATE_FAILED
		reg.fatalError = truncateMessage(err.Error())
		logger.Info("Function registration failed", "registrationID", reg.id)
		return
	}
	reg.fn = fn
	reg.state = runtimev1.FunctionState_FUNCTION_STATE_READY
	logger.V(2).Info("Function registered", "registrationID", reg.id)
}

func (s *Server) awaitLoaded(ctx context.Context, reg *registration) (*runtimev1.RegistrationStatus, error) {
	select {
	case <-reg.loaded:
		return reg.status(), nil
	case <-ctx.Done():
		return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(),
			"Run %s attempt %d is still registering; call RegisterFunction again with the same attempt and digest to wait for it", reg.runUID, reg.attempt)
	}
}

// lookupRegistration finds the current generation for a Run UID and checks
// that the caller holds its ID.
func (s *Server) lookupRegistration(uid, id string) (*registration, error) {
	if err := validateRunUID(uid); err != nil {
		return nil, err
	}
	s.mu.Lock()
	reg, ok := s.regs[uid]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Run %s has no function registration here; call RegisterFunction first", uid)
	}
	if reg.id != id {
		return reg, status.Errorf(codes.FailedPrecondition, "registration ID %q is stale: Run %s is registered at attempt %d under another ID; use the ID RegisterFunction returned", id, uid, reg.attempt)
	}
	return reg, nil
}

// lookupAttempt finds the current generation of a Run UID for a caller that
// names it by attempt: NotFound when there is none, FailedPrecondition when
// it is newer than attempt.
func (s *Server) lookupAttempt(uid string, attempt int64) (*registration, error) {
	if err := validateRunUID(uid); err != nil {
		return nil, err
	}
	if attempt < 1 {
		return nil, status.Error(codes.InvalidArgument, "pass registration_id, or registration_attempt >= 1")
	}
	s.mu.Lock()
	reg, ok := s.regs[uid]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Run %s has no function registration here", uid)
	}
	if reg.attempt > attempt {
		return reg, status.Errorf(codes.FailedPrecondition, "Run %s is registered at attempt %d, newer than attempt %d; it is left alone", uid, reg.attempt, attempt)
	}
	return reg, nil
}

// FunctionStatus implements runtimev1.FunctionRuntimeServer.
func (s *Server) FunctionStatus(_ context.Context, req *runtimev1.FunctionStatusRequest) (*runtimev1.RegistrationStatus, error) {
	reg, err := s.lookupRegistration(req.GetRunUid(), req.GetRegistrationId())
	if err != nil {
		return nil, err
	}
	return reg.status(), nil
}

// UnregisterFunction implements runtimev1.FunctionRuntimeServer.
func (s *Server) UnregisterFunction(ctx context.Context, req *runtimev1.UnregisterFunctionRequest) (*runtimev1.UnregisterFunctionResponse, error) {
	var reg *registration
	var err error
	if req.GetRegistrationId() == "" {
		reg, err = s.lookupAttempt(req.GetRunUid(), req.GetRegistrationAttempt())
	} else {
		reg, err = s.lookupRegistration(req.GetRunUid(), req.GetRegistrationId())
	}
	if status.Code(err) == codes.NotFound {
		return &runtimev1.UnregisterFunctionResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if req.GetDrainTimeoutMillis() < 0 {
		return nil, status.Error(codes.InvalidArgument, "drain_timeout_millis must not be negative")
	}
	logger := klog.FromContext(ctx).WithValues("runUID", reg.runUID, "registrationID", reg.id)

	reg.mu.Lock()
	if reg.draining {
		reg.mu.Unlock()
		// Another Unregister is releasing this generation; answer when it did.
		select {
		case <-reg.gone:
			return &runtimev1.UnregisterFunctionResponse{}, nil
		case <-ctx.Done():
			return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "Run %s is still draining; call UnregisterFunction again", reg.runUID)
		}
	}
	reg.draining = true
	reg.mu.Unlock()

	drain := s.opts.DefaultDrainTimeout
	if ms := req.GetDrainTimeoutMillis(); ms > 0 {
		drain = time.Duration(ms) * time.Millisecond
	}
	if req.GetCancelInFlight() {
		drain = 0
	}
	resp := &runtimev1.UnregisterFunctionResponse{}
	// Taking the slot proves nothing is in flight, and keeps it that way.
	acquired := false
	select {
	case reg.slot <- struct{}{}:
		acquired = true
	default:
	}
	if !acquired && drain > 0 {
		timer := time.NewTimer(drain)
		select {
		case reg.slot <- struct{}{}:
			acquired = true
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	if !acquired {
		logger.V(2).Info("Cancelling the in-flight invocation", "drainTimeout", drain)
		reg.cancel(errUnregistered)
		// Adapters stop promptly once their context ends.
		reg.slot <- struct{}{}
		resp.CancelledInFlight = true
	}

	s.mu.Lock()
	if s.regs[reg.runUID] == reg {
		delete(s.regs, reg.runUID)
		s.retireLocked(reg.runUID, reg.attempt)
	}
	s.mu.Unlock()
	reg.shutdown()
	close(reg.gone)
	logger.V(2).Info("Function unregistered", "cancelledInFlight", resp.GetCancelledInFlight())
	return resp, nil
}

// retireLocked remembers an unregistered attempt. The memory is bounded: a
// Run forgotten here can at worst be registered again at an old attempt,
// which runtimed's own fencing already prevents.
func (s *Server) retireLocked(uid string, attempt int64) {
	if _, ok := s.retired[uid]; !ok {
		s.retiredOrder = append(s.retiredOrder, uid)
	}
	if attempt > s.retired[uid] {
		s.retired[uid] = attempt
	}
	for len(s.retiredOrder) > maxRetiredRegistrations {
		delete(s.retired, s.retiredOrder[0])
		s.retiredOrder = s.retiredOrder[1:]
	}
}

// Registrations is how many functions are registered.
func (s *Server) Registrations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.regs)
}

// WaitReleased returns once no function is registered, or ctx's error.
func (s *Server) WaitReleased(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for s.Registrations() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// ListFunctions implements runtimev1.FunctionRuntimeServer.
func (s *Server) ListFunctions(context.Context, *runtimev1.ListFunctionsRequest) (*runtimev1.ListFunctionsResponse, error) {
	s.mu.Lock()
	regs := make([]*registration, 0, len(s.regs))
	for _, reg := range s.regs {
		regs = append(regs, reg)
	}
	s.mu.Unlock()
	resp := &runtimev1.ListFunctionsResponse{Registrations: make([]*runtimev1.RegistrationStatus, 0, len(regs))}
	for _, reg := range regs {
		resp.Registrations = append(resp.Registrations, reg.status())
	}
	return resp, nil
}
