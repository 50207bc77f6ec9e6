package runtimepod

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestHeartbeatFresh(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	renewed := func(ago time.Duration, seconds *int32) *coordinationv1.Lease {
		at := metav1.NewMicroTime(now.Add(-ago))
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &at, LeaseDurationSeconds: seconds}}
	}
	cases := []struct {
		name  string
		lease *coordinationv1.Lease
		fresh bool
	}{
		{"no Lease is not fresh", nil, false},
		{"a Lease never renewed is not fresh", &coordinationv1.Lease{}, false},
		{"renewed within its duration is fresh", renewed(9*time.Second, ptr.To[int32](10)), true},
		{"renewed exactly its duration ago is stale", renewed(10*time.Second, ptr.To[int32](10)), false},
		{"a Lease without a duration uses the default", renewed(HeartbeatLeaseDuration-time.Second, nil), true},
		{"the default duration also ends", renewed(HeartbeatLeaseDuration, nil), false},
		{"the Lease's own duration wins over the default", renewed(30*time.Second, ptr.To[int32](40)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.fresh, HeartbeatFresh(tc.lease, now))
		})
	}
}

func TestRuntimeOfServiceAccount(t *testing.T) {
	cases := []struct {
		name, serviceAccount, runtime string
		ok                            bool
	}{
		{"a Runtime's ServiceAccount names it", ServiceAccountName("bash"), "bash", true},
		{"the prefix alone names no Runtime", "runtime-", "", false},
		{"another ServiceAccount names none", "default", "", false},
		{"a look-alike without the dash names none", "runtimed-e2e", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runtime, ok := RuntimeOfServiceAccount(tc.serviceAccount)
			assert.Equal(t, tc.ok, ok)
			if ok {
				assert.Equal(t, tc.runtime, runtime)
			}
		})
	}
}

func TestSocketPath(t *testing.T) {
	cases := []struct {
		name    string
		address string
		want    string
		wantErr bool
	}{
		{name: "the Runtime Pod's socket is its file", address: RuntimeSocket, want: SocketDir + "/runtime.sock"},
		{name: "a TCP address is refused", address: "tcp://127.0.0.1:9000", wantErr: true},
		{name: "an empty socket path is refused", address: "unix://", wantErr: true},
		{name: "a relative socket path is refused", address: "unix://runtime.sock", wantErr: true},
		{name: "a bare path is refused", address: "/run/kruntimes/runtime.sock", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, err := SocketPath(tc.address)
			if tc.wantErr {
				assert.ErrorContains(t, err, "never listens on the network")
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.want, path)
		})
	}
}

func TestShutdownBoundsFitTheGrace(t *testing.T) {
	for _, tc := range []struct {
		grace          *int64
		drain, timeout time.Duration
	}{
		{nil, 5 * time.Second, 15 * time.Second},
		{ptr.To[int64](60), 5 * time.Second, 15 * time.Second},
		{ptr.To[int64](5), 800 * time.Millisecond, 2500 * time.Millisecond},
		{ptr.To[int64](0), 0, 0},
	} {
		drain, timeout := ShutdownBounds(tc.grace)
		assert.Equal(t, tc.drain, drain, "drain for grace %v", tc.grace)
		assert.Equal(t, tc.timeout, timeout, "timeout for grace %v", tc.grace)
	}
}
