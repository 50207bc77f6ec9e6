package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
)

// maxDeadlineMargin bounds the margin kept between the invocation's
// deadline and the request's, so that this server's typed 504 arrives
// before kube-apiserver gives up on the request with a plain one. The
// margin is a tenth of the time the request has left, at most this: a
// short ?timeout=, common for agent tools, keeps most of its time.
const maxDeadlineMargin = time.Second

// minInvocationTimeout is the shortest invocation sent to runtimed: the
// hop counts whole milliseconds, where 0 would mean no bound at all.
const minInvocationTimeout = 10 * time.Millisecond

// margins are what is kept of the time a request has left: margin before
// the invocation's deadline, and the RPC's slack past it (a fifth of the
// margin) that lets the Runtime Server stop a handler at its deadline, and
// say so, before the call itself is cut.
func margins(left time.Duration) (margin, rpcSlack time.Duration) {
	margin = min(left/10, maxDeadlineMargin)
	return margin, margin / 5
}

// statusClientClosedRequest is what the metrics record when the caller went
// away before an answer: nobody reads one.
const statusClientClosedRequest = 499

// invokeHandler serves one invocation of the Run name.
type invokeHandler struct {
	router     Router
	maxTimeout time.Duration
	// waiting bounds the invocations waiting for this Run, shared by all
	// of runs/invoke.
	waiting   *waitingInvocations
	namespace string
	name      string
	uid       types.UID
	responder rest.Responder
	// started is when serve began: the apiserver's Server-Timing counts
	// from it.
	started time.Time
	// header is the answer's, for Server-Timing on errors too.
	header http.Header
	// errorTiming is the Server-Timing of an error runtimed answered; empty
	// for the apiserver's own share alone.
	errorTiming string
	// waitForReady bounds the wait for a function on its way to Ready;
	// waited is how long this invocation waited.
	waitForReady, waited time.Duration
	// ready is that wait, in the handler to spare an allocation.
	ready readyWait
}

func (h *invokeHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	started := time.Now()
	invokeInFlight.Inc()
	code := h.serve(w, req)
	invokeInFlight.Dec()
	invokeRequests.WithLabelValues(strconv.Itoa(code)).Inc()
	invokeDuration.Observe(time.Since(started).Seconds())
}

// serve answers the invocation and returns the HTTP status it answered.
func (h *invokeHandler) serve(w http.ResponseWriter, req *http.Request) int {
	h.started, h.header = time.Now(), w.Header()
	ctx := req.Context()
	// Minted here and nowhere else: every hop after this one is handed it.
	// Only an ID the caller sent is deduplicated: the caller alone can
	// send it again.
	invocationID := req.Header.Get(invocation.HeaderID)
	callerSent := invocationID != ""
	if callerSent {
		if err := invocation.CheckID(invocationID); err != nil {
			return h.fail(apierrors.NewBadRequest(fmt.Sprintf("%s: %v", invocation.HeaderID, err)))
		}
	} else {
		invocationID = newInvocationID()
	}
	w.Header().Set(invocation.HeaderID, invocationID)

	if err := checkContentType(req.Header.Get("Content-Type")); err != nil {
		return h.fail(err)
	}
	uid := h.uid
	if header := types.UID(req.Header.Get(invocation.HeaderRunUID)); header != "" {
		if uid != "" && uid != header {
			return h.fail(apierrors.NewBadRequest(fmt.Sprintf("?uid=%s and %s: %s name different Runs", uid, invocation.HeaderRunUID, header)))
		}
		uid = header
	}
	input, err := readInput(w, req)
	if err != nil {
		return h.fail(err)
	}
	caller := ""
	if user, ok := genericapirequest.UserFrom(ctx); ok {
		caller = user.GetName()
	}
	// readInput validated the input as JSON: nothing downstream scans it
	// again.
	inv := runtimedclient.Invocation{ID: invocationID, Input: input, Caller: caller, CallerSentID: callerSent}
	wait := &h.ready
	wait.start(ctx, h)
	defer wait.stop()
	for {
		answer, err := h.dispatch(ctx, w, uid, inv)
		if err == nil {
			return h.answer(w, answer)
		}
		if !errors.Is(err, runtimedclient.ErrBecomingReady) || !wait.next(ctx) {
			if errors.Is(ctx.Err(), context.Canceled) {
				return statusClientClosedRequest
			}
			if wait.refused {
				invokeRefused.WithLabelValues(refusedTooManyWaiting).Inc()
				return h.fail(apierrors.NewTooManyRequests(fmt.Sprintf(
					"%d invocations already wait for Run %s/%s to become Ready; this one did not start: send it again shortly", h.waiting.max, h.namespace, h.name), 1))
			}
			return h.fail(err)
		}
		// Waited for the function: what runtimed said of the last try
		// is not this answer's.
		h.errorTiming = ""
	}
}

// recheckInterval is how often a waiting invocation routes again without
// a change the router saw: a runtimed that is unreachable, or that refused
// the invocation, says so before its Pod or Run changes.
const recheckInterval = 500 * time.Millisecond

// readyWait is an invocation's wait for its function, on its way to Ready,
// to become routable: it routes again at each change the router sees of
// the Run or of a Runtime Pod, within its bound.
type readyWait struct {
	h      *invokeHandler
	waiter RouteWaiter
	// until is when the wait is over: waitForReady after the request
	// arrived, and no later than half of the request's time, so that the
	// other half is left to the invocation.
	until   time.Time
	changed <-chan struct{}
	release func()
	// counted: this invocation is one of its Run's waiting ones; refused:
	// as many as may wait already did, so it did not.
	counted, refused bool
}

// start sets the wait of h's invocation up; it waits for nothing when h's
// router cannot tell changes or waiting is off.
func (w *readyWait) start(ctx context.Context, h *invokeHandler) {
	w.h = h
	waiter, ok := h.router.(RouteWaiter)
	if !ok || h.waitForReady <= 0 {
		return
	}
	w.waiter, w.until = waiter, h.started.Add(h.waitForReady)
	if deadline, ok := ctx.Deadline(); ok {
		if half := h.started.Add(deadline.Sub(h.started) / 2); half.Before(w.until) {
			w.until = half
		}
	}
}

// next waits for a change of the function's route and reports whether to
// route the invocation again: false once the wait is over or ctx ended.
func (w *readyWait) next(ctx context.Context) bool {
	now := time.Now()
	if w.waiter == nil || !now.Before(w.until) || ctx.Err() != nil {
		return false
	}
	if w.changed == nil {
		if !w.h.waiting.take(w.key()) {
			w.refused = true
			return false
		}
		w.counted = true
		// The first refusal: watch from now on and route again at once,
		// so that a change made before the watch began is not missed.
		w.changed, w.release = w.waiter.RouteChanged(w.h.namespace, w.h.name)
		return true
	}
	timer := time.NewTimer(min(w.until.Sub(now), recheckInterval))
	defer timer.Stop()
	select {
	case <-w.changed:
	case <-timer.C:
	case <-ctx.Done():
	}
	w.h.waited += time.Since(now)
	if ctx.Err() != nil {
		return false
	}
	w.release()
	w.changed, w.release = w.waiter.RouteChanged(w.h.namespace, w.h.name)
	return true
}

// key names the Run waited for among all of runs/invoke's.
func (w *readyWait) key() string { return w.h.namespace + "/" + w.h.name }

func (w *readyWait) stop() {
	if w.release != nil {
		w.release()
	}
	if w.counted {
		w.h.waiting.give(w.key())
	}
	if w.h.waited > 0 {
		invokeWaitDuration.Observe(w.h.waited.Seconds())
	}
}

// dispatch routes inv, all but its route and timeout filled in, and sends
// it to the owning runtimed. An error is the API error to answer with, marked
// runtimedclient.ErrBecomingReady when the handler did not run and the
// function is expected to become routable soon.
func (h *invokeHandler) dispatch(ctx context.Context, w http.ResponseWriter, uid types.UID, inv runtimedclient.Invocation) (*runtimedclient.Answer, error) {
	route, err := h.router.Route(ctx, h.namespace, h.name, uid)
	if err != nil {
		return nil, routeStatus(err)
	}
	if route.Input != nil {
		if violations := route.Input.Validate(inv.Input); len(violations) > 0 {
			return nil, inputInvalid(h.name, violations)
		}
	}
	timeout, rpcSlack, err := h.invocationTimeout(ctx, route.Deadline)
	if err != nil {
		return nil, err
	}
	// The same invocation each try: only the route's part and the time
	// left change.
	inv.RunUID, inv.Attempt, inv.PodUID = route.RunUID, route.Attempt, route.PodUID
	inv.Timeout, inv.CallSlack = timeout, rpcSlack
	answer, err := route.Runtimed.Invoke(ctx, inv)
	if answer != nil && answer.Replayed {
		w.Header().Set(invocation.HeaderDeduplicated, "true")
	}
	if err != nil {
		if answer != nil && answer.Timed {
			h.errorTiming = withWait(errorServerTiming(time.Since(h.started)-h.waited, answer.Runtimed, answer.Replayed), h.waited)
		}
		return nil, err
	}
	return answer, nil
}

// answer writes runtimed's answer.
func (h *invokeHandler) answer(w http.ResponseWriter, answer *runtimedclient.Answer) int {
	if e := answer.Result.Error; e != nil {
		w.Header().Set(invocation.HeaderFunctionError, e.Type)
	}
	w.Header().Set(invocation.HeaderServerTiming, withWait(serverTiming(time.Since(h.started)-h.waited, answer), h.waited))
	h.responder.Object(http.StatusOK, &answer.Result)
	return http.StatusOK
}

// fail answers with err as a metav1.Status (Retry-After on 429 and 503
// comes from its details) and returns its code.
func (h *invokeHandler) fail(err error) int {
	// An error runtimed did not answer is the apiserver's time alone.
	timing := h.errorTiming
	if timing == "" {
		timing = withWait(serverTiming(time.Since(h.started)-h.waited, nil), h.waited)
	}
	h.header.Set(invocation.HeaderServerTiming, timing)
	h.responder.Error(err)
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return int(status.Status().Code)
	}
	return http.StatusInternalServerError
}

// invocationTimeout is the request's own deadline less the margin, bounded
// by the server's maximum and the Run's remaining lifetime (runDeadline,
// zero when the Run has none), and the slack the RPC gets past it.
func (h *invokeHandler) invocationTimeout(ctx context.Context, runDeadline time.Time) (timeout, rpcSlack time.Duration, err error) {
	timeout = h.maxTimeout
	_, rpcSlack = margins(timeout)
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		margin, slack := margins(left)
		if left-margin < minInvocationTimeout {
			return 0, 0, apierrors.NewBadRequest(fmt.Sprintf("the request's timeout leaves no time to invoke: pass a ?timeout= of at least %s", minInvocationTimeout*10/9+time.Millisecond))
		}
		if left-margin < timeout {
			timeout, rpcSlack = left-margin, slack
		}
	}
	if !runDeadline.IsZero() {
		left := time.Until(runDeadline)
		if left < minInvocationTimeout {
			return 0, 0, runtimedclient.Unavailable("the Run's spec.timeout has passed; it is ending")
		}
		timeout = min(timeout, left)
	}
	return timeout, rpcSlack, nil
}

// checkContentType accepts JSON, with parameters or without a type at all
// (kubectl create --raw sends none).
func checkContentType(contentType string) error {
	if contentType == "" {
		return nil
	}
	media, _, err := mime.ParseMediaType(contentType)
	if err == nil && media == invocation.ContentTypeJSON {
		return nil
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("Content-Type %q is not supported: the input of a function is JSON (application/json)", contentType),
	}}
}

// readInput reads the body, at most MaxInputBytes of it (a larger body is
// refused without reading the rest), and checks that it is JSON nested at
// most MaxInputDepth deep: the one check of the input on its way to the
// handler.
func readInput(w http.ResponseWriter, req *http.Request) ([]byte, error) {
	tooLarge := apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the input of a function is at most %d bytes", invocation.MaxInputBytes))
	if req.ContentLength > invocation.MaxInputBytes {
		return nil, tooLarge
	}
	size := 512
	if req.ContentLength > 0 {
		size = int(req.ContentLength)
	}
	buf := make([]byte, 0, size)
	body := http.MaxBytesReader(w, req.Body, invocation.MaxInputBytes)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return nil, tooLarge
		}
		if err != nil {
			return nil, apierrors.NewBadRequest("reading the input: " + err.Error())
		}
	}
	if !json.Valid(buf) {
		return nil, apierrors.NewBadRequest("the input is not valid JSON")
	}
	if depth := invocation.NestingDepth(buf); depth > invocation.MaxInputDepth {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the input nests arrays and objects %d levels deep; at most %d are accepted, and the handler did not run", depth, invocation.MaxInputDepth))
	}
	return buf, nil
}

// inputInvalid answers a body that breaks the Run's input schema: 400 (the
// handler did not run, and the same body never will), each violation a
// cause with its path below "input", as a 422 lists a field's.
func inputInvalid(name string, violations field.ErrorList) error {
	causes := make([]metav1.StatusCause, 0, len(violations))
	for _, v := range violations {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseType(v.Type), Message: v.ErrorBody(), Field: v.Field})
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
		Message: fmt.Sprintf("the input does not match the function's spec.mode.function.schema.input, and the handler did not run: %s", violations.ToAggregate()),
		Details: &metav1.StatusDetails{Name: name, Group: kruntimes.GroupName, Kind: "runs", Causes: causes},
	}}
}

// routeStatus is the answer to an invocation the router could not route:
// its API error, with Retry-After when it is a 503 and only then (a 409 or
// a 501 is permanent, and a Retry-After would invite retries forever).
func routeStatus(err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return apierrors.NewInternalError(err)
	}
	st := status.Status()
	switch {
	case st.Code == http.StatusServiceUnavailable:
		if errors.Is(err, runtimedclient.ErrBecomingReady) {
			return runtimedclient.BecomingReady(runtimedclient.Unavailable(st.Message))
		}
		return runtimedclient.Unavailable(st.Message)
	case st.Code >= 400 && st.Code < 500, st.Code == http.StatusNotImplemented:
		if st.Details != nil && st.Details.RetryAfterSeconds != 0 {
			st.Details = st.Details.DeepCopy()
			st.Details.RetryAfterSeconds = 0
			return &apierrors.StatusError{ErrStatus: st}
		}
		return err
	}
	return apierrors.NewInternalError(err)
}

// serverTiming is the Server-Timing of an answer that took total here:
// each hop's own share in whole microseconds, adding up to total —
// apiserver, then runtimed and handler when runtimed answered, and whether
// the worker was warm, or that the outcome was replayed (the handler did
// not run for this answer).
func serverTiming(total time.Duration, answer *runtimedclient.Answer) string {
	totalMicros := max(total.Microseconds(), 0)
	if answer == nil {
		return "apiserver;dur=" + millis(totalMicros)
	}
	handler := int64(0)
	if !answer.Replayed {
		handler = min(max(answer.Handler.Microseconds(), 0), totalMicros)
	}
	// runtimed's time holds the handler's; one that does not say is
	// counted as the handler's alone.
	runtimed := min(max(answer.Runtimed.Microseconds(), handler), totalMicros)
	var b strings.Builder
	b.Grow(96)
	b.WriteString("apiserver;dur=")
	b.WriteString(millis(totalMicros - runtimed))
	b.WriteString(", runtimed;dur=")
	b.WriteString(millis(runtimed - handler))
	if answer.Replayed {
		b.WriteString(", dedup;desc=replayed")
		return b.String()
	}
	b.WriteString(", handler;dur=")
	b.WriteString(millis(handler))
	if answer.WorkerWarm {
		b.WriteString(", worker;desc=warm")
	} else {
		b.WriteString(", worker;desc=cold")
	}
	return b.String()
}

// errorServerTiming is the Server-Timing of an error runtimed answered
// after runtimedTook of its own: apiserver and runtimed (the handler's time
// is not told apart), and the replay mark.
func errorServerTiming(total, runtimedTook time.Duration, replayed bool) string {
	totalMicros := max(total.Microseconds(), 0)
	runtimed := min(max(runtimedTook.Microseconds(), 0), totalMicros)
	timing := "apiserver;dur=" + millis(totalMicros-runtimed) + ", runtimed;dur=" + millis(runtimed)
	if replayed {
		timing += ", dedup;desc=replayed"
	}
	return timing
}

// withWait adds to timing how long the invocation waited for its function
// to be routable, when it did: timing's parts count the rest.
func withWait(timing string, waited time.Duration) string {
	if waited <= 0 {
		return timing
	}
	return timing + ", wait;dur=" + millis(waited.Microseconds())
}

// millis writes whole microseconds as milliseconds, Server-Timing's unit.
func millis(micros int64) string {
	frac := strconv.FormatInt(micros%1000, 10)
	return strconv.FormatInt(micros/1000, 10) + "." + strings.Repeat("0", 3-len(frac)) + frac
}

func newInvocationID() string {
	b := make([]byte, 16)
	// crypto/rand.Read never fails on supported platforms.
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
