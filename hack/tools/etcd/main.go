// Command etcd starts an etcd server. It is the entry point that etcd's own
// binary uses, built from the server module so that the version is pinned here.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
