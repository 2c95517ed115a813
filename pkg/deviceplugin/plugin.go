// Package deviceplugin is a kubelet device plugin (the deviceplugin/v1beta1
// gRPC API) that advertises fake GPUs. A node running it has real extended
// resources: the kubelet counts them, the scheduler places pods on them, and
// each container learns which devices it was given, as it would from a
// vendor's plugin. Nothing here touches hardware.
package deviceplugin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	// DefaultResourceName is the name NVIDIA's plugin advertises, so pod specs
	// written for real clusters run unchanged.
	DefaultResourceName = "nvidia.com/gpu"
	// VisibleDevicesEnv is the variable NVIDIA's container runtime reads; a
	// worker image reads it to learn its devices.
	VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
)

// Config says what the plugin advertises and where the kubelet listens.
type Config struct {
	// ResourceName is the extended resource, such as nvidia.com/gpu.
	ResourceName string
	// Count is the number of devices advertised.
	Count int
	// Dir holds the kubelet's registration socket and the plugin's own.
	Dir string
	// SocketName is the plugin's socket in Dir.
	SocketName string
	// IDSeed makes device ids differ between nodes (the node's name, say).
	IDSeed string
	// CheckInterval is how often the plugin looks for a restarted kubelet.
	CheckInterval time.Duration
}

func (c *Config) defaults() {
	if c.ResourceName == "" {
		c.ResourceName = DefaultResourceName
	}
	if c.Dir == "" {
		c.Dir = pluginapi.DevicePluginPath
	}
	if c.SocketName == "" {
		c.SocketName = "gputask-" + strings.NewReplacer("/", "-", ".", "-").Replace(c.ResourceName) + ".sock"
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = time.Second
	}
}

// DeviceIDs returns the ids the plugin advertises for seed: GPU-<uuid>, as
// nvidia-smi names devices, stable across restarts of the plugin.
func DeviceIDs(seed string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", seed, i)))
		ids[i] = fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
	}
	return ids
}

// Plugin serves the DevicePlugin service and keeps itself registered.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg     Config
	devices []*pluginapi.Device
	known   map[string]bool

	mu            sync.Mutex
	registrations int
}

// New returns a plugin for cfg, with defaults filled in.
func New(cfg Config) (*Plugin, error) {
	cfg.defaults()
	if cfg.Count < 0 {
		return nil, fmt.Errorf("device count %d is negative", cfg.Count)
	}
	p := &Plugin{cfg: cfg, known: map[string]bool{}}
	for _, id := range DeviceIDs(cfg.IDSeed, cfg.Count) {
		p.devices = append(p.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
		p.known[id] = true
	}
	return p, nil
}

// Registrations counts the plugin's successful registrations with the kubelet.
func (p *Plugin) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registrations
}

// Run serves and registers until ctx is done. The kubelet forgets every plugin
// when it restarts and removes their sockets, so Run starts over whenever its
// socket disappears or the kubelet's socket is a new file.
func (p *Plugin) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var srv *grpc.Server
	defer func() {
		if srv != nil {
			srv.Stop()
		}
	}()
	for {
		if srv != nil {
			srv.Stop()
		}
		var kubelet fileID
		var err error
		srv, kubelet, err = p.serveAndRegister(ctx)
		if err != nil {
			logger.Error(err, "Device plugin not registered, retrying")
		} else {
			logger.Info("Device plugin registered", "resource", p.cfg.ResourceName, "devices", len(p.devices))
		}
		if err := p.waitForRestart(ctx, kubelet, err != nil); err != nil {
			return nil
		}
		logger.Info("Kubelet restarted or plugin socket removed, registering again")
	}
}

const kubeletSocketName = "kubelet.sock"

// serveAndRegister starts a server on the plugin's socket and registers it.
// It returns the server, also when the registration fails, and which kubelet
// socket it registered with.
func (p *Plugin) serveAndRegister(ctx context.Context) (*grpc.Server, fileID, error) {
	sock := filepath.Join(p.cfg.Dir, p.cfg.SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fileID{}, fmt.Errorf("removing stale socket %s: %w", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fileID{}, fmt.Errorf("listening on %s: %w", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	kubeletSock := filepath.Join(p.cfg.Dir, kubeletSocketName)
	id, _ := statID(kubeletSock)
	return srv, id, p.register(ctx, kubeletSock)
}

func (p *Plugin) register(ctx context.Context, kubeletSock string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dialing kubelet at %s: %w", kubeletSock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.cfg.SocketName,
		ResourceName: p.cfg.ResourceName,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("registering %s with kubelet at %s: %w", p.cfg.ResourceName, kubeletSock, err)
	}
	p.mu.Lock()
	p.registrations++
	p.mu.Unlock()
	return nil
}

// fileID tells two files at one path apart. A socket made again at once may
// get the freed inode back, so the change time is part of it.
type fileID struct {
	dev, ino   uint64
	ctimeNanos int64
}

func statID(path string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, ctimeNanos: st.Ctim.Nano()}, true
}

// waitForRestart returns nil when the plugin must register again, and ctx's
// error when it is done. The state is polled rather than watched for events,
// so a restart is seen once however many files it touched. After a failed
// registration it retries every CheckInterval.
func (p *Plugin) waitForRestart(ctx context.Context, registered fileID, failed bool) error {
	own := filepath.Join(p.cfg.Dir, p.cfg.SocketName)
	ticker := time.NewTicker(p.cfg.CheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
		if failed {
			return nil
		}
		if _, ok := statID(own); !ok {
			return nil
		}
		if id, ok := statID(filepath.Join(p.cfg.Dir, kubeletSocketName)); ok && id != registered {
			return nil
		}
	}
}

// GetDevicePluginOptions says the plugin needs no PreStartContainer call and
// offers no preferred allocation: every fake device is alike.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once; fake devices never change health, so
// the stream then stays open until the kubelet or the plugin ends it.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Allocate tells each container which devices it got, through the variable
// NVIDIA's runtime reads.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		for _, id := range creq.DevicesIds {
			if !p.known[id] {
				return nil, fmt.Errorf("allocating unknown device %q", id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{VisibleDevicesEnv: strings.Join(creq.DevicesIds, ",")},
		})
	}
	return resp, nil
}

// PreStartContainer is never called, since the options do not ask for it.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
