// Command coredns is CoreDNS (github.com/coredns/coredns, pinned by go.mod) with only the
// plugins a test node's cluster DNS needs: kubernetes (Service and Pod records of
// cluster.local read from the API server), forward (other names to the host's resolvers),
// bind, cache, errors, log, health and ready. The rest of CoreDNS's plugins (cloud providers,
// DNSSEC, etcd ...) are left out to keep the build small.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order plugins handle a query in (a subset of CoreDNS's plugin.cfg, same order).
func init() {
	dnsserver.Directives = []string{
		"bind", "health", "ready", "errors", "log", "cache", "kubernetes", "forward",
	}
}

func main() {
	coremain.Run()
}
