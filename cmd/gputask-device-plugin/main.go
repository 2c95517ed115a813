// Command gputask-device-plugin advertises fake GPUs to the kubelet through
// the device plugin API, so a real node without GPUs runs GPUTasks as if it
// had them. Each container is told its devices in NVIDIA_VISIBLE_DEVICES.
//
//	gputask-device-plugin --count 8 --resource nvidia.com/gpu
//
// See pkg/deviceplugin and docs/node.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gputask/gputask-controller/pkg/deviceplugin"
)

func main() {
	fs := flag.NewFlagSet("gputask-device-plugin", flag.ExitOnError)
	klog.InitFlags(fs)
	hostname, _ := os.Hostname()
	cfg := deviceplugin.Config{}
	fs.StringVar(&cfg.ResourceName, "resource", deviceplugin.DefaultResourceName, "Extended resource to advertise.")
	fs.IntVar(&cfg.Count, "count", 8, "Number of fake devices.")
	fs.StringVar(&cfg.Dir, "dir", pluginapi.DevicePluginPath, "Directory of the kubelet's registration socket (kubelet.sock).")
	fs.StringVar(&cfg.IDSeed, "id-seed", hostname, "Makes device ids differ between nodes; the node's name by default.")
	fs.DurationVar(&cfg.CheckInterval, "check-interval", 0, "How often to look for a restarted kubelet (1s when zero).")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := deviceplugin.New(cfg)
	if err == nil {
		err = p.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gputask-device-plugin:", err)
		os.Exit(1)
	}
}
