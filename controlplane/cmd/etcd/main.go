// Command etcd is the etcd server of the release in k8s.io/kubernetes' own module graph
// (the one its integration tests run against).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
