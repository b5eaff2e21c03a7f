// CoreDNS with only the plugins the e2e cluster's DNS needs (the cluster.local zone from the Kubernetes API, health
// and readiness endpoints, a cache, query logs on demand). The documented way to trim CoreDNS is a main package that
// imports the wanted plugins (coredns.io: "compile time enabling or disabling plugins"); the full plugin set would
// compile every cloud SDK for nothing.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
