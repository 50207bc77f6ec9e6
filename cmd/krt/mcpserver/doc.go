// Package mcpserver is krt mcp: the Model Context Protocol server krt
// embeds, serving the Ready function Runs a caller may invoke as tools (and
// the sandbox tools), over stdio as the kubeconfig's identity or over
// streamable HTTP with a session per bearer token.
package mcpserver
