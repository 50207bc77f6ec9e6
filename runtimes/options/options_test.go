package options

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr bool
	}{
		{name: "bash on a unix socket is valid", opts: Options{Language: "bash", Listen: "unix:///tmp/x.sock"}},
		{name: "python on a unix socket is valid", opts: Options{Language: "python", Listen: "unix:///tmp/x.sock"}},
		{name: "unknown language is rejected", opts: Options{Language: "ruby", Listen: "unix:///tmp/x.sock"}, wantErr: true},
		{name: "TCP listen address is rejected", opts: Options{Language: "bash", Listen: "tcp://127.0.0.1:9000"}, wantErr: true},
		{name: "a run log bound of 64 KiB is valid", opts: Options{Language: "bash", Listen: "unix:///tmp/x.sock", RunLogMaxBytes: 64 << 10}},
		{name: "a run log bound under 1 KiB is rejected", opts: Options{Language: "bash", Listen: "unix:///tmp/x.sock", RunLogMaxBytes: 100}, wantErr: true},
		{name: "a run log bound over 3 MiB is rejected (one gRPC message)", opts: Options{Language: "bash", Listen: "unix:///tmp/x.sock", RunLogMaxBytes: 4 << 20}, wantErr: true},
		{name: "empty socket path is rejected", opts: Options{Language: "bash", Listen: "unix://"}, wantErr: true},
		{name: "more spare workers than the bound are rejected", opts: Options{Language: "python", Listen: "unix:///tmp/x.sock", SpareWorkers: maxSpareWorkers + 1}, wantErr: true},
		{name: "a negative capacity is rejected", opts: Options{Language: "python", Listen: "unix:///tmp/x.sock", Capacity: -1}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.wantErr {
				assert.Error(t, err)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}

// TestSpareWorkersDefault: unset, the spares follow the Pod's capacity
// (one per slot, bounded), so the functions a rollout moves onto a new Pod
// at once find warm workers; $KRUNTIMES_CAPACITY sets the capacity.
func TestSpareWorkersDefault(t *testing.T) {
	for _, tc := range []struct {
		name             string
		spares, capacity int
		want             int
	}{
		{"unknown capacity", -1, 0, defaultSpareWorkers},
		{"one per slot", -1, 4, 4},
		{"bounded", -1, 100, autoSpareWorkers},
		{"set explicitly", 3, 100, 3},
		{"turned off", 0, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Options{SpareWorkers: tc.spares, Capacity: tc.capacity}
			assert.Equal(t, tc.want, o.spareWorkers())
		})
	}
	t.Setenv("KRUNTIMES_CAPACITY", "6")
	assert.Equal(t, 6, NewOptions().Capacity)
	assert.Equal(t, 6, NewOptions().spareWorkers())
}

// TestRunServesUntilCancelled starts the command's server on a socket whose
// directory does not exist yet, checks Health, and stops it.
func TestRunServesUntilCancelled(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "runtime.sock")
	o := &Options{Language: "python", Listen: "unix://" + sock, StateDir: filepath.Join(dir, "state"), ShutdownTimeout: 5 * time.Second}
	require.NoError(t, o.Validate())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- o.Run(ctx) }()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := runtimev1.NewRuntimeClient(conn)
	var health *runtimev1.HealthResponse
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		health, err = client.Health(ctx, &runtimev1.HealthRequest{})
		return err == nil, nil
	})
	require.NoError(t, err)
	assert.Equal(t, "python", health.GetLanguage())
	assert.True(t, health.GetFunctionsSupported())

	cancel()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}
