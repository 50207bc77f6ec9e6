package runtimev1

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NotStartedError returns a gRPC error of code c whose status carries the
// NotStarted detail: the promise that no handler started, so the call may
// be sent again.
func NotStartedError(c codes.Code, format string, args ...any) error {
	return withNotStarted(status.New(c, fmt.Sprintf(format, args...)))
}

// MarkNotStarted returns err, a gRPC error or any other, as a gRPC error of
// the same code and message that also carries the NotStarted detail. It
// returns nil for nil and err itself when it carries it already.
func MarkNotStarted(err error) error {
	if err == nil || IsNotStarted(err) {
		return err
	}
	return withNotStarted(status.Convert(err))
}

func withNotStarted(st *status.Status) error {
	withDetail, err := st.WithDetails(&NotStarted{})
	if err != nil {
		// Only a status of code OK refuses details, and that is no error:
		// keep it as it is.
		return st.Err()
	}
	return withDetail.Err()
}

// IsNotStarted says whether err is a gRPC error whose status carries the
// NotStarted detail. It reads the detail's type name alone, so it needs no
// registry of message types and costs nothing on an error without details.
func IsNotStarted(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st == nil {
		return false
	}
	for _, detail := range st.Proto().GetDetails() {
		if detail.MessageIs((*NotStarted)(nil)) {
			return true
		}
	}
	return false
}
