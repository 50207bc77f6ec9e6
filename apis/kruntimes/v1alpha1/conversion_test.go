package v1alpha1_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/install"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// TestRunLogOptionsFromQuery decodes runs/log's query as the apiserver
// does, through the scheme's parameter codec.
func TestRunLogOptionsFromQuery(t *testing.T) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	codec := runtime.NewParameterCodec(scheme)
	cases := []struct {
		name    string
		query   string
		want    kruntimes.RunLogOptions
		wantErr bool
	}{
		{name: "nothing set", query: "", want: kruntimes.RunLogOptions{}},
		{name: "every option", query: "follow=true&tailLines=10&limitBytes=100&timestamps=true&attempt=2&stream=Stderr",
			want: kruntimes.RunLogOptions{Follow: true, TailLines: ptr.To[int64](10), LimitBytes: ptr.To[int64](100), Timestamps: true, Attempt: ptr.To[int32](2), Stream: kruntimes.RunLogStreamStderr}},
		{name: "an attempt over int32 is refused", query: "attempt=3000000000", wantErr: true},
		{name: "an attempt that is no number is refused", query: "attempt=two", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			require.NoError(t, err)
			got := &kruntimes.RunLogOptions{}
			err = codec.DecodeParameters(q, v1alpha1.SchemeGroupVersion, got)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			got.TypeMeta = tc.want.TypeMeta
			assert.Equal(t, &tc.want, got)
		})
	}
}

// TestRunLogOptionsToQuery encodes options as the typed client does.
func TestRunLogOptionsToQuery(t *testing.T) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	q, err := runtime.NewParameterCodec(scheme).EncodeParameters(&v1alpha1.RunLogOptions{TailLines: ptr.To[int64](3), Attempt: ptr.To[int32](1), Stream: string(v1alpha1.RunLogStreamStdout)}, v1alpha1.SchemeGroupVersion)
	require.NoError(t, err)
	assert.Equal(t, "attempt=1&stream=Stdout&tailLines=3", q.Encode())
}

// TestRunFilesOptionsFromQuery decodes runs/files' query as the apiserver
// does: the path exactly as sent, spaces and dots included.
func TestRunFilesOptionsFromQuery(t *testing.T) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	q, err := url.ParseQuery("path=" + url.QueryEscape("data/a b/../c.bin"))
	require.NoError(t, err)
	got := &kruntimes.RunFilesOptions{}
	require.NoError(t, runtime.NewParameterCodec(scheme).DecodeParameters(q, v1alpha1.SchemeGroupVersion, got))
	assert.Equal(t, "data/a b/../c.bin", got.Path)

	q, err = url.ParseQuery("path=src&archive=" + url.QueryEscape(string(kruntimes.RunFilesArchiveTarGzip)))
	require.NoError(t, err)
	got = &kruntimes.RunFilesOptions{}
	require.NoError(t, runtime.NewParameterCodec(scheme).DecodeParameters(q, v1alpha1.SchemeGroupVersion, got))
	assert.Equal(t, kruntimes.RunFilesArchiveTarGzip, got.Archive, "archive is decoded as sent")
}
