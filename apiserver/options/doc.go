// Package options holds the flags of kruntimes-apiserver and turns them into
// a server configuration: the recommended generic apiserver options
// (serving, delegated authn/authz, audit, admission, feature gates) plus the
// storage backend choice and the standalone development mode.
package options
