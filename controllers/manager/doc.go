// Package manager hosts the kruntimes controllers (runtime, scheduler, recovery, gc)
// in one process, from a client config for the cluster and one for the
// kruntimes.io API, behind client-go leader election so that any number of
// replicas, in kruntimes-apiserver or in kruntimes-controllers, is safe.
package manager
