package health

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestReadyzReportsEveryCheck(t *testing.T) {
	healthy := Check{Name: "informer", Check: func(context.Context) error { return nil }}
	broken := Check{Name: "runtime-server", Check: func(context.Context) error { return errors.New("socket missing") }}
	cases := []struct {
		name     string
		checks   []Check
		wantCode int
		wantBody string
	}{
		{"all checks pass → 200", []Check{healthy}, http.StatusOK, "[+]informer ok"},
		{"one failing check → 503 naming it", []Check{healthy, broken}, http.StatusServiceUnavailable, "[-]runtime-server failed: socket missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Handler(nil, tc.checks, false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			assert.Equal(t, tc.wantCode, rec.Code)
			assert.Contains(t, rec.Body.String(), tc.wantBody)
		})
	}
}
