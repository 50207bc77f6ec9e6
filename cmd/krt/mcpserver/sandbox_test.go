package mcpserver

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
)

func TestReadFileResult(t *testing.T) {
	structured := func(raw string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: raw}}, StructuredContent: json.RawMessage(raw)}
	}
	r := readFileResult(structured(`{"data_b64":"aGVsbG8g4piD"}`))
	assert.JSONEq(t, `{"size":9,"content":"hello ☃"}`, string(r.StructuredContent.(json.RawMessage)))
	assert.JSONEq(t, `{"size":9,"content":"hello ☃"}`, textOf(t, r))
	r = readFileResult(structured(`{"data_b64":"AP8="}`))
	assert.JSONEq(t, `{"size":2,"content_base64":"AP8="}`, string(r.StructuredContent.(json.RawMessage)))
	failed := errorResult("SandboxPathError")
	assert.Same(t, failed, readFileResult(failed))
}
