package app

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestExitCodeOf(t *testing.T) {
	kruntimesUnavailable := apierrors.NewServiceUnavailable("not Ready")
	kruntimesUnavailable.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"429 is busy", apierrors.NewTooManyRequests("busy", 1), ExitBusy},
		{"kruntimes' 503 with retryAfterSeconds is unavailable", kruntimesUnavailable, ExitUnavailable},
		{"a 503 without retryAfterSeconds is outcome unknown", apierrors.NewServiceUnavailable("no endpoints"), ExitUnknown},
		{"504 is a timeout", apierrors.NewTimeoutError("slow", 0), ExitTimeout},
		{"500 is outcome unknown: it may come after the handler ran", apierrors.NewInternalError(errors.New("x")), ExitUnknown},
		{"404 is an error", apierrors.NewNotFound(schema.GroupResource{Resource: "runs"}, "x"), ExitError},
		{"a connection that could not be made is an error", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, ExitError},
		{"a connection that broke after sending is outcome unknown", io.ErrUnexpectedEOF, ExitUnknown},
	}
	bad := apierrors.NewInternalError(errors.New("x"))
	bad.ErrStatus.Code = 502
	cases = append(cases, struct {
		name string
		err  error
		want int
	}{"502 is outcome unknown", bad, ExitUnknown})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, exitCodeOf(tc.err))
		})
	}
}

func TestInput(t *testing.T) {
	got, err := (&invokeOptions{}).input(nil)
	require.NoError(t, err)
	assert.Equal(t, "{}", string(got), "no input is an empty object")

	got, err = (&invokeOptions{file: "-"}).input(strings.NewReader(`[1,2]`))
	require.NoError(t, err)
	assert.Equal(t, "[1,2]", string(got))

	_, err = (&invokeOptions{data: "{not json"}).input(nil)
	assert.ErrorContains(t, err, "not valid JSON")
	_, err = (&invokeOptions{data: "{}", file: "x"}).input(nil)
	assert.ErrorContains(t, err, "not both")
}
