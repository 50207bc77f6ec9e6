// Package mcpserver is krt mcp: the Model Context Protocol server krt
// embeds, serving the Ready function Runs a caller may invoke as tools (and
// the sandbox tools), over stdio as the kubeconfig's identity or over
// streamable HTTP, each request acting as its bearer token and the sessions
// of one principal sharing a watch of the Runs.
package mcpserver
