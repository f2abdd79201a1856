// Command etcd is the etcd server of the local control plane: etcd's own entry point, built from
// the go.etcd.io/etcd/server/v3 module at the version the pinned Kubernetes release is tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
