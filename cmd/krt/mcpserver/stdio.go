package mcpserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
)

// serveStdio serves one MCP session, acting as config's identity, over
// standard input and output until the client closes them or ctx ends.
func serveStdio(ctx context.Context, config *rest.Config, scope toolScope, selector labels.Selector, streams genericiooptions.IOStreams, o *mcpOptions) error {
	session, err := newMCPSession(ctx, config, nil, nil, scope, selector, o, nil)
	if err != nil {
		return err
	}
	defer session.stop()
	session.start()
	if err := session.waitSynced(ctx); err != nil {
		return err
	}
	fmt.Fprintf(streams.ErrOut, "krt mcp: serving the Ready function Runs of %s matching %q over stdio (MCP %s)\n", scope, selector.String(), MCPProtocolRevision)
	err = session.server.Run(ctx, &mcp.IOTransport{Reader: readCloser{streams.In}, Writer: writeCloser{streams.Out}})
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed)) {
		return nil
	}
	return err
}

// readCloser and writeCloser let the SDK's transport close standard input
// and output without closing krt's.
type readCloser struct {
	r interface{ Read([]byte) (int, error) }
}

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (readCloser) Close() error                 { return nil }

type writeCloser struct {
	w interface{ Write([]byte) (int, error) }
}

func (w writeCloser) Write(p []byte) (int, error) { return w.w.Write(p) }
func (writeCloser) Close() error                  { return nil }
