package app

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"kruntimes.io/kruntimes/apis/invocation"
)

// answerHeader keeps the headers of the last answer through its transport,
// for invoke -v: client-go's result does not hand them out.
type answerHeader struct {
	mu     sync.Mutex
	header http.Header
}

// wrap is a rest.Config WrapTransport that records each answer's headers;
// a nil answerHeader records nothing.
func (a *answerHeader) wrap(rt http.RoundTripper) http.RoundTripper {
	if a == nil {
		return rt
	}
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			a.mu.Lock()
			a.header = resp.Header.Clone()
			a.mu.Unlock()
		}
		return resp, err
	})
}

// reset forgets the last answer, before another attempt.
func (a *answerHeader) reset() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.header = nil
}

// replayed says whether the last answer repeated the recorded outcome of
// an earlier invocation with its ID.
func (a *answerHeader) replayed() bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.header.Get(invocation.HeaderDeduplicated) == "true"
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// print writes the invocation ID, the Server-Timing and the replay mark of
// the answer, and total, the time krt waited for it.
func (a *answerHeader) print(w io.Writer, total time.Duration) {
	if a == nil {
		return
	}
	a.mu.Lock()
	h := a.header
	a.mu.Unlock()
	if h == nil {
		fmt.Fprintf(w, "no answer (after %s)\n", total.Round(time.Microsecond))
		return
	}
	fmt.Fprintf(w, "Invocation ID: %s\n", h.Get(invocation.HeaderID))
	if st := h.Get(invocation.HeaderServerTiming); st != "" {
		fmt.Fprintf(w, "Server-Timing: %s\n", st)
	}
	if h.Get(invocation.HeaderDeduplicated) == "true" {
		fmt.Fprintf(w, "%s: true (the recorded outcome of an earlier invocation with this ID; the handler did not run again)\n", invocation.HeaderDeduplicated)
	}
	fmt.Fprintf(w, "Total (krt): %s\n", total.Round(time.Microsecond))
}
