package run

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/runlog"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
)

// TestLongRunning: a follow of runs/log and runs/files are exempt from the
// request timeout; a plain read of runs/log, other subresources and other resources are not.
func TestLongRunning(t *testing.T) {
	check := LongRunning(func(_ *http.Request, info *genericapirequest.RequestInfo) bool { return info.Verb == "watch" })
	for _, tc := range []struct {
		url         string
		resource    string
		subresource string
		verb        string
		want        bool
	}{
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/log?follow=true", "runs", "log", "get", true},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/log?follow=1", "runs", "log", "get", true},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/log", "runs", "log", "get", false},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/log?follow=false", "runs", "log", "get", false},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/invoke?follow=true", "runs", "invoke", "create", false},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/files?path=big.bin", "runs", "files", "get", true},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/a/files?path=big.bin", "runs", "files", "update", true},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runtimes/a/log?follow=true", "runtimes", "log", "get", false},
		{"/apis/kruntimes.io/v1alpha1/namespaces/ns/runs?watch=true", "runs", "", "watch", true},
	} {
		r := httptest.NewRequest("GET", tc.url, nil)
		info := &genericapirequest.RequestInfo{IsResourceRequest: true, Resource: tc.resource, Subresource: tc.subresource, Verb: tc.verb}
		assert.Equal(t, tc.want, check(r, info), tc.url)
	}
}

// endlessStream is a running task that prints faster than its follow
// gets it: each response says more was written than it brings, so the
// follow never catches up, until total bytes were sent.
type endlessStream struct {
	offset, total int64
	line          []byte
}

func (s *endlessStream) Recv() (*runtimedclient.LogResponse, error) {
	if s.offset >= s.total {
		return nil, errors.New("the task is still running; the test is over")
	}
	resp := &runtimedclient.LogResponse{Offset: s.offset, Written: s.offset + 2*int64(len(s.line)),
		Chunks: []runlog.Chunk{{Stream: runlog.StreamStdout, Data: s.line}}}
	s.offset += int64(len(s.line))
	return resp, nil
}

// endlessRuntimed serves one endlessStream.
type endlessRuntimed struct {
	runtimedclient.Interface
	stream *endlessStream
}

func (r endlessRuntimed) FollowLog(context.Context, runtimedclient.LogKey, int64) (runtimedclient.LogStream, error) {
	return r.stream, nil
}

// TestTailFollowIsBounded: `krt logs -f --tail=1` on a task that prints
// faster than two hops deliver holds the last line while it gathers, not
// everything it received.
func TestTailFollowIsBounded(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const total = 256 << 20
	runtimed := endlessRuntimed{stream: &endlessStream{total: total, line: bytes.Repeat([]byte("y\n"), 16<<10)}}
	one := int64(1)
	w := httptest.NewRecorder()
	before := heap()
	f := startFollow(w, &kruntimes.RunLogOptions{Follow: true, TailLines: &one})
	done, _ := followLive(context.Background(), f, runtimed, runtimedclient.LogKey{RunUID: "run", Attempt: 1, PodUID: "pod"})
	held := int64(heap()) - int64(before)
	runtime.KeepAlive(f)
	require.False(t, done, "the stream failed, to be tried again")
	assert.Equal(t, int64(total), f.offset, "the follow read everything sent")
	assert.Zero(t, w.Body.Len(), "nothing is written before the follow catches up")
	assert.Less(t, held, int64(runlog.MaxTailBytes), "bytes held by a tailLines=1 follow that received %d bytes", total)
}
