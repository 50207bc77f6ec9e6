// Package openapi holds the generated OpenAPI definitions of the kruntimes.io
// types and the core/v1 types they embed, served as OpenAPI v2 and v3 so that
// kubectl explain and server-side apply work.
package openapi
