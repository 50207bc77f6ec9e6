// Package chartmode holds the end-to-end test of the Helm chart installed
// for real: the local cluster in chart mode (localcluster.KruntimesChart)
// runs `helm upgrade --install` of charts/kruntimes, and the node agent runs
// the chart's Deployment from bin/kruntimes-apiserver behind its Service,
// PVC and APIService. It starts a cluster of its own; run with
// go test ./test/e2e/chartmode.
package chartmode
