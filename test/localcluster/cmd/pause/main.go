// Command pause is the sandbox ("pause") container of the local cluster's
// real node: it holds a Pod's namespaces, reaps orphaned children and exits
// on SIGINT or SIGTERM, as registry.k8s.io/pause does. The local cluster
// builds it statically into an image in its loopback registry, because the
// node has no route to registry.k8s.io.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
