package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver/testserver"
)

// BenchmarkEncodePage measures what a server spends serializing one LIST
// page of 500 of the benchmark's Runs, as stored (managedFields included),
// in JSON and in protobuf, and what the whole page costs from a server
// holding only those 500 — with the gzip every client-go and kubectl
// request asks for, and without: the floor under "LIST page of 500" that no
// storage or cache change removes.
func BenchmarkEncodePage(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	progressOut = io.Discard
	s := testserver.Start(b, "")
	t, err := newTarget("embedded", s.Config, "/apis/kruntimes.io/v1alpha1", "kruntimes.io/v1alpha1", "default", 8)
	require.NoError(b, err)
	_, err = t.fill(ctx, 0, 500, 8, nil)
	require.NoError(b, err)
	body, err := t.doAccept(ctx, "GET", t.runsURL()+"?limit=500", "", protobufMediaType, nil)
	require.NoError(b, err)
	list := &v1alpha1.RunList{}
	info := serializerFor(b, protobufMediaType)
	_, _, err = info.Serializer.Decode(body, nil, list)
	require.NoError(b, err)
	require.Len(b, list.Items, 500)

	for _, mediaType := range []string{"application/json", protobufMediaType} {
		encoder := runCodecs.EncoderForVersion(serializerFor(b, mediaType).Serializer, v1alpha1.SchemeGroupVersion)
		b.Run(mediaType, func(b *testing.B) {
			var out bytes.Buffer
			for b.Loop() {
				out.Reset()
				if err := encoder.Encode(list, &out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(out.Len()), "bytes/page")
		})
		for _, encoding := range []string{"gzip", "identity"} {
			b.Run("GET/"+mediaType+"/"+encoding, func(b *testing.B) {
				for b.Loop() {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.runsURL()+"?limit=500", nil)
					require.NoError(b, err)
					req.Header.Set("Accept", mediaType)
					req.Header.Set("Accept-Encoding", encoding)
					resp, err := t.client.Do(req)
					require.NoError(b, err)
					var body io.Reader = resp.Body
					if resp.Header.Get("Content-Encoding") == "gzip" {
						body, err = gzip.NewReader(resp.Body)
						require.NoError(b, err)
					}
					_, err = io.Copy(io.Discard, body)
					resp.Body.Close()
					require.NoError(b, err)
					require.Equal(b, http.StatusOK, resp.StatusCode)
				}
			})
		}
	}
}

func serializerFor(tb testing.TB, mediaType string) runtime.SerializerInfo {
	info, ok := runtime.SerializerInfoForMediaType(runCodecs.SupportedMediaTypes(), mediaType)
	require.True(tb, ok, mediaType)
	return info
}
