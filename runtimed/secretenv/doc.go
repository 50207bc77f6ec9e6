// Package secretenv builds the environment runtimed hands the Runtime Server
// for one attempt of a Run: plain values as the Run writes them, and
// valueFrom.secretKeyRef values read from the Run's namespace with runtimed's
// own identity, so only Secrets that namespace granted to the Runtime's
// ServiceAccount resolve. Values go to the Runtime Server only: never to
// status, events or logs.
package secretenv
