package fake

import (
	"context"
	"io"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	fakerest "k8s.io/client-go/rest/fake"
	testing "k8s.io/client-go/testing"

	kruntimesv1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// Invoke records the invocation as a create of runs/invoke and returns what
// a reactor answers: the fake clientset runs no function.
func (c *fakeRuns) Invoke(ctx context.Context, name string, input []byte, opts typedv1alpha1.InvokeOptions) (*kruntimesv1alpha1.InvokeResult, error) {
	action := testing.NewCreateSubresourceAction(schema.GroupVersionResource{
		Group: kruntimesv1alpha1.SchemeGroupVersion.Group, Version: kruntimesv1alpha1.SchemeGroupVersion.Version, Resource: "runs",
	}, name, "invoke", c.Namespace(), &kruntimesv1alpha1.InvokeResult{})
	obj, err := c.Fake.Invokes(action, &kruntimesv1alpha1.InvokeResult{})
	if obj == nil {
		return nil, err
	}
	return obj.(*kruntimesv1alpha1.InvokeResult), err
}

func runsResource() schema.GroupVersionResource {
	return kruntimesv1alpha1.SchemeGroupVersion.WithResource("runs")
}

// GetLogs records a get of runs/log and returns a request that answers
// "fake logs", as the fake Pods client does.
func (c *fakeRuns) GetLogs(name string, opts *kruntimesv1alpha1.RunLogOptions) *rest.Request {
	action := testing.GenericActionImpl{}
	action.Verb = "get"
	action.Namespace = c.Namespace()
	action.Resource = runsResource()
	action.Subresource = "log"
	action.Value = opts
	_, _ = c.Fake.Invokes(action, &kruntimesv1alpha1.Run{})
	client := &fakerest.RESTClient{
		Client: fakerest.CreateHTTPClient(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("fake logs"))}, nil
		}),
	}
	return client.Request()
}

// SaveLog records a create of runs/log.
func (c *fakeRuns) SaveLog(ctx context.Context, name string, attempt int32, log *kruntimesv1alpha1.RunLog) error {
	action := testing.NewCreateSubresourceAction(runsResource(), name, "log", c.Namespace(), log)
	_, err := c.Fake.Invokes(action, log)
	return err
}

// GetFile records a get of runs/files and returns a request that answers
// "fake file".
func (c *fakeRuns) GetFile(name, path string) *rest.Request {
	action := testing.GenericActionImpl{}
	action.Verb = "get"
	action.Namespace = c.Namespace()
	action.Resource = runsResource()
	action.Subresource = "files"
	action.Value = &kruntimesv1alpha1.RunFilesOptions{Path: path}
	_, _ = c.Fake.Invokes(action, &kruntimesv1alpha1.Run{})
	client := &fakerest.RESTClient{
		Client: fakerest.CreateHTTPClient(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("fake file"))}, nil
		}),
	}
	return client.Request()
}

// PutFile records an update of runs/files and reads body whole, as the
// server would.
func (c *fakeRuns) PutFile(ctx context.Context, name, path string, body io.Reader) (int64, error) {
	action := testing.GenericActionImpl{}
	action.Verb = "update"
	action.Namespace = c.Namespace()
	action.Resource = runsResource()
	action.Subresource = "files"
	action.Value = &kruntimesv1alpha1.RunFilesOptions{Path: path}
	if _, err := c.Fake.Invokes(action, &kruntimesv1alpha1.Run{}); err != nil {
		return 0, err
	}
	return io.Copy(io.Discard, body)
}

// GetArchive records a get of runs/files with an archive and returns a
// request that answers "fake archive".
func (c *fakeRuns) GetArchive(name, dir string, format kruntimesv1alpha1.RunFilesArchive) *rest.Request {
	action := testing.GenericActionImpl{}
	action.Verb = "get"
	action.Namespace = c.Namespace()
	action.Resource = runsResource()
	action.Subresource = "files"
	action.Value = &kruntimesv1alpha1.RunFilesOptions{Path: dir, Archive: string(format)}
	_, _ = c.Fake.Invokes(action, &kruntimesv1alpha1.Run{})
	client := &fakerest.RESTClient{
		Client: fakerest.CreateHTTPClient(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("fake archive"))}, nil
		}),
	}
	return client.Request()
}

// PutArchive records an update of runs/files with extract=tar and reads
// archive whole, as the server would; it counts no files.
func (c *fakeRuns) PutArchive(ctx context.Context, name, dir string, archive io.Reader) (int64, int64, error) {
	action := testing.GenericActionImpl{}
	action.Verb = "update"
	action.Namespace = c.Namespace()
	action.Resource = runsResource()
	action.Subresource = "files"
	action.Value = &kruntimesv1alpha1.RunFilesOptions{Path: dir, Extract: string(kruntimesv1alpha1.RunFilesExtractTar)}
	if _, err := c.Fake.Invokes(action, &kruntimesv1alpha1.Run{}); err != nil {
		return 0, 0, err
	}
	n, err := io.Copy(io.Discard, archive)
	return 0, n, err
}
