// The pod sandbox ("pause") process of the e2e node: holds the pod's namespaces, reaps nothing, exits on
// SIGTERM/SIGINT. A stand-in for registry.k8s.io/pause, which cannot be pulled offline.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
