package run

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics/testutil"

	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// movingRouter is a RouteWaiter whose function is on its way to Ready
// until ready is called, and a fakeRouter after that.
type movingRouter struct {
	fakeRouter
	// refusal is what Route answers until ready; BecomingReady when nil.
	refusal error

	mu      sync.Mutex
	routed  bool
	waiters []chan struct{}
	// watched counts RouteChanged calls.
	watched int
}

func (r *movingRouter) Route(ctx context.Context, namespace, name string, uid types.UID) (*Route, error) {
	r.mu.Lock()
	routed := r.routed
	r.mu.Unlock()
	if !routed {
		if r.refusal != nil {
			return nil, r.refusal
		}
		return nil, runtimedclient.BecomingReady(apierrors.NewServiceUnavailable("Run ns/fn is not Ready; retry shortly"))
	}
	// Under the lock: fakeRouter counts its routes, and invocations route
	// concurrently.
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fakeRouter.Route(ctx, namespace, name, uid)
}

func (r *movingRouter) RouteChanged(string, string) (<-chan struct{}, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watched++
	ch := make(chan struct{})
	r.waiters = append(r.waiters, ch)
	return ch, func() {}
}

// ready makes the function routable and wakes the waiters, as the
// ownership cache does when the Run's Ready event arrives.
func (r *movingRouter) ready() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routed = true
	for _, ch := range r.waiters {
		close(ch)
	}
	r.waiters = nil
}

func (r *movingRouter) watches() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watched
}

// countingRuntimed answers each call with the next of errs, then as
// runtimed does for a function that ran; it counts the calls.
type countingRuntimed struct {
	fakeRuntimed // for FollowLog
	mu           sync.Mutex
	errs         []error
	calls        int
}

func (c *countingRuntimed) Invoke(ctx context.Context, in *runtimedv1.InvokeRequest, opts ...grpc.CallOption) (*runtimedv1.InvokeResponse, error) {
	c.mu.Lock()
	c.calls++
	var err error
	if len(c.errs) > 0 {
		err, c.errs = c.errs[0], c.errs[1:]
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return (&fakeRuntimed{}).Invoke(ctx, in, opts...)
}

// invokeWaiting serves inv as invoke does, with waitForReady.
func invokeWaiting(t *testing.T, router Router, waitForReady time.Duration, inv call) answer {
	t.Helper()
	return invokeWith(t, router, InvokeSettings{MaxTimeout: time.Minute, WaitForReady: waitForReady}, inv)
}

func TestInvokeWaitsForAFunctionBecomingReady(t *testing.T) {
	t.Run("it waits for the function and runs it once", func(t *testing.T) {
		runtimed := &countingRuntimed{}
		router := &movingRouter{}
		r := &routedTo{movingRouter: router, runtimed: runtimed}
		answered := make(chan answer, 1)
		go func() { answered <- invokeWaiting(t, r, time.Minute, call{}) }()
		// Ready once the invocation waits: it watched, routed again, and
		// was refused again.
		require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return router.watches() >= 2, nil
		}))
		router.ready()
		a := <-answered
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		assert.Equal(t, 1, runtimed.calls, "dispatched once, when the function was Ready")
		assert.Contains(t, a.header.Get("Server-Timing"), ", wait;dur=", "the wait is its own part of Server-Timing")
		assert.True(t, strings.HasPrefix(a.header.Get("Server-Timing"), "apiserver;dur="), a.header.Get("Server-Timing"))
	})

	t.Run("a refusal of runtimed before the handler started is routed again", func(t *testing.T) {
		runtimed := &countingRuntimed{errs: []error{runtimev1.NotStartedError(codes.Unavailable, "runtimed is closing its invocations for shutdown")}}
		r := &routedTo{movingRouter: &movingRouter{routed: true}, runtimed: runtimed}
		a := invokeWaiting(t, r, time.Minute, call{})
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		assert.Equal(t, 2, runtimed.calls, "refused once, then ran")
	})

	t.Run("the wait is bounded: then 503 with Retry-After", func(t *testing.T) {
		r := &movingRouter{}
		a := invokeWaiting(t, r, 300*time.Millisecond, call{})
		require.Equal(t, http.StatusServiceUnavailable, a.code, "%s", a.body)
		assert.Equal(t, "1", a.header.Get("Retry-After"))
		assert.Contains(t, a.header.Get("Server-Timing"), ", wait;dur=")
		a.status(t)
	})

	t.Run("it waits at most half of the request's time", func(t *testing.T) {
		r := &movingRouter{}
		a := invokeWaiting(t, r, time.Minute, call{timeout: 400 * time.Millisecond})
		require.Equal(t, http.StatusServiceUnavailable, a.code, "answered 503 before its deadline, not 504: %s", a.body)
		assert.Equal(t, "1", a.header.Get("Retry-After"))
	})

	t.Run("a Run the scheduler parked is answered at once", func(t *testing.T) {
		r := &movingRouter{refusal: apierrors.NewServiceUnavailable("Run ns/fn is not Ready; retry shortly")}
		a := invokeWaiting(t, r, time.Minute, call{})
		require.Equal(t, http.StatusServiceUnavailable, a.code, "%s", a.body)
		assert.Equal(t, "1", a.header.Get("Retry-After"))
		assert.Zero(t, r.watches(), "no wait")
		assert.NotContains(t, a.header.Get("Server-Timing"), "wait")
	})

	t.Run("a busy function is answered 429 at once", func(t *testing.T) {
		runtimed := &countingRuntimed{errs: []error{runtimev1.NotStartedError(codes.ResourceExhausted, "busy")}}
		r := &routedTo{movingRouter: &movingRouter{routed: true}, runtimed: runtimed}
		a := invokeWaiting(t, r, time.Minute, call{})
		require.Equal(t, http.StatusTooManyRequests, a.code, "%s", a.body)
		assert.Equal(t, 1, runtimed.calls)
	})

	t.Run("a router that cannot wait answers 503 at once", func(t *testing.T) {
		a := invokeWaiting(t, &fakeRouter{err: runtimedclient.BecomingReady(apierrors.NewServiceUnavailable("Run ns/fn is not Ready; retry shortly"))}, time.Minute, call{})
		require.Equal(t, http.StatusServiceUnavailable, a.code, "%s", a.body)
	})

	t.Run("without --invoke-wait-for-ready it answers 503 at once", func(t *testing.T) {
		r := &movingRouter{}
		a := invokeWaiting(t, r, 0, call{})
		require.Equal(t, http.StatusServiceUnavailable, a.code, "%s", a.body)
		assert.Zero(t, r.watches())
	})

	t.Run("a caller that goes away while it waits is not answered", func(t *testing.T) {
		r := &movingRouter{}
		ctx, cancel := context.WithCancel(t.Context())
		answered := make(chan answer, 1)
		go func() { answered <- invokeWaiting(t, r, time.Minute, call{ctx: ctx}) }()
		require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return r.watches() >= 2, nil
		}))
		cancel()
		a := <-answered
		assert.Equal(t, statusClientClosedRequest, a.code)
	})
}

// routedTo routes a movingRouter's invocations to runtimed.
type routedTo struct {
	*movingRouter
	runtimed runtimedv1.RuntimedClient
}

func (r *routedTo) Route(ctx context.Context, namespace, name string, uid types.UID) (*Route, error) {
	route, err := r.movingRouter.Route(ctx, namespace, name, uid)
	if err != nil {
		return nil, err
	}
	route.Runtimed = runtimedclient.New(r.runtimed, nil)
	return route, nil
}

// TestInvokeWaitingForReadyIsBoundedPerRun: at most MaxWaitingPerRun
// invocations wait for one function on its way to Ready; one more is
// answered 429 + Retry-After at once, never sent, and counted in
// kruntimes_invoke_refused_total{reason="TooManyWaiting"}; the waiting
// ones run once it is Ready, and their places are free again.
func TestInvokeWaitingForReadyIsBoundedPerRun(t *testing.T) {
	const maxWaiting = 2
	runtimed := &countingRuntimed{}
	router := &movingRouter{}
	r := newInvokeREST(&routedTo{movingRouter: router, runtimed: runtimed}, InvokeSettings{MaxTimeout: time.Minute, WaitForReady: time.Minute, MaxWaitingPerRun: maxWaiting})
	refused := func() float64 {
		v, err := testutil.GetCounterMetricValue(invokeRefused.WithLabelValues(refusedTooManyWaiting))
		require.NoError(t, err)
		return v
	}
	before := refused()

	answered := make(chan answer, maxWaiting)
	for range maxWaiting {
		go func() { answered <- invokeOn(t, r, call{}) }()
	}
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return router.watches() >= maxWaiting, nil
	}), "both wait")

	a := invokeOn(t, r, call{})
	assert.Equal(t, http.StatusTooManyRequests, a.code, "%s", a.body)
	assert.NotEmpty(t, a.header.Get("Retry-After"))
	assert.Contains(t, a.status(t).Message, "2 invocations already wait for Run ns/fn to become Ready")
	assert.Equal(t, float64(1), refused()-before, "the refusal is counted")

	router.ready()
	for range maxWaiting {
		assert.Equal(t, http.StatusOK, (<-answered).code, "a waiting invocation runs once the function is Ready")
	}
	assert.Equal(t, http.StatusOK, invokeOn(t, r, call{}).code)
	assert.Empty(t, r.waiting.byRun, "no place is left taken")
	runtimed.mu.Lock()
	defer runtimed.mu.Unlock()
	assert.Equal(t, maxWaiting+1, runtimed.calls, "the refused one was never sent")
}
