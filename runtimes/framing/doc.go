// Package framing reads and writes the length-prefixed frames that carry
// requests and responses between a Runtime Server and its warm language
// workers over pipes: a 4-byte big-endian payload length, then the payload.
// The length is bounded so a confused or hostile worker cannot make the server
// allocate without limit.
package framing
