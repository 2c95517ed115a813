// Command pause is the one program of the real node's image: the pod sandbox
// that holds a pod's namespaces, and the container of the tests' tasks. It
// prints the devices the device plugin gave it, so a test reads them from
// the pod's log, then sleeps until it is told to stop.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if devices, ok := os.LookupEnv("NVIDIA_VISIBLE_DEVICES"); ok {
		fmt.Printf("NVIDIA_VISIBLE_DEVICES=%s\n", devices)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
