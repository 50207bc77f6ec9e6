// Package invoke is the runs/invoke subresource: a rest.Connecter that takes
// the function's JSON input, routes it from an ownership cache fed by
// informers (Runs from this server's own storage, Runtime Pods from the
// cluster) to the runtimed that owns the Run, over gRPC with mutual TLS,
// and answers with the handler's result or a typed error. No storage read
// and no Kubernetes API call happens per invocation.
package invoke
