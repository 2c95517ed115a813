package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeKubelet serves the Registration service on dir/kubelet.sock, as the
// kubelet does, and records each registration.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir string
	srv *grpc.Server

	mu   sync.Mutex
	regs []*pluginapi.RegisterRequest
}

func startFakeKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{dir: dir}
	k.start(t)
	return k
}

func (k *fakeKubelet) start(t *testing.T) {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(k.dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(lis) }()
	t.Cleanup(k.srv.Stop)
}

// restart does what a restarted kubelet does: a new registration socket, and
// every plugin socket in the directory removed.
func (k *fakeKubelet) restart(t *testing.T, pluginSocket string) {
	t.Helper()
	k.srv.Stop()
	_ = os.Remove(filepath.Join(k.dir, "kubelet.sock"))
	if pluginSocket != "" {
		if err := os.Remove(filepath.Join(k.dir, pluginSocket)); err != nil {
			t.Fatal(err)
		}
	}
	k.start(t)
}

func (k *fakeKubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.regs = append(k.regs, req)
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) registrations() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*pluginapi.RegisterRequest(nil), k.regs...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tempDir is short: a unix socket path must fit in 108 bytes.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func startPlugin(t *testing.T, cfg Config) (*Plugin, pluginapi.DevicePluginClient) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.cfg.Dir, p.cfg.SocketName), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p, pluginapi.NewDevicePluginClient(conn)
}

func TestRegistersListsAndAllocates(t *testing.T) {
	dir := tempDir(t)
	kubelet := startFakeKubelet(t, dir)
	p, client := startPlugin(t, Config{Count: 8, Dir: dir, IDSeed: "node-a", CheckInterval: 10 * time.Millisecond})

	waitFor(t, "registration", func() bool { return len(kubelet.registrations()) == 1 })
	reg := kubelet.registrations()[0]
	if reg.ResourceName != "nvidia.com/gpu" || reg.Version != pluginapi.Version || reg.Endpoint != p.cfg.SocketName {
		t.Errorf("registered %q version %q endpoint %q, want nvidia.com/gpu %s %s", reg.ResourceName, reg.Version, reg.Endpoint, pluginapi.Version, p.cfg.SocketName)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range first.Devices {
		if d.Health != pluginapi.Healthy {
			t.Errorf("device %s is %s, want Healthy", d.ID, d.Health)
		}
		if !strings.HasPrefix(d.ID, "GPU-") {
			t.Errorf("device id %q lacks the GPU- prefix", d.ID)
		}
		seen[d.ID] = true
	}
	if len(first.Devices) != 8 || len(seen) != 8 {
		t.Fatalf("ListAndWatch sent %d devices, %d distinct; want 8 and 8", len(first.Devices), len(seen))
	}

	ids := []string{first.Devices[2].ID, first.Devices[5].ID}
	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 1 {
		t.Fatalf("Allocate returned %d container responses, want 1", len(resp.ContainerResponses))
	}
	got := strings.Split(resp.ContainerResponses[0].Envs[VisibleDevicesEnv], ",")
	if len(got) != 2 || got[0] == got[1] || got[0] != ids[0] || got[1] != ids[1] {
		t.Errorf("%s = %q, want the two distinct ids %q", VisibleDevicesEnv, got, ids)
	}

	if _, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-unknown"}}}}); err == nil {
		t.Error("Allocate of an unknown device succeeded, want an error")
	}
}

func TestRegistersAgainWhenKubeletRestarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		// removeSocket says whether the restart removes the plugin's socket,
		// as the kubelet does, or only re-creates its own.
		removeSocket bool
	}{
		{name: "plugin socket removed", removeSocket: true},
		{name: "only kubelet socket re-created", removeSocket: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tempDir(t)
			kubelet := startFakeKubelet(t, dir)
			p, _ := startPlugin(t, Config{Count: 2, Dir: dir, CheckInterval: 10 * time.Millisecond})
			waitFor(t, "first registration", func() bool { return len(kubelet.registrations()) == 1 })

			socket := ""
			if tc.removeSocket {
				socket = p.cfg.SocketName
			}
			kubelet.restart(t, socket)
			waitFor(t, "second registration", func() bool { return len(kubelet.registrations()) == 2 })
			// The plugin counts a registration once the kubelet's answer
			// is back, which can be after the kubelet has recorded it.
			waitFor(t, "the plugin's count of 2", func() bool { return p.Registrations() >= 2 })
			if _, err := os.Stat(filepath.Join(dir, p.cfg.SocketName)); err != nil {
				t.Errorf("plugin socket after re-registration: %v", err)
			}
			// No restart, no further registration: after many more checks
			// the count is still 2.
			checks := 0
			waitFor(t, "50 quiet checks", func() bool { checks++; return checks > 50 })
			if n := len(kubelet.registrations()); n != 2 {
				t.Errorf("kubelet saw %d registrations without another restart, want 2", n)
			}
			if n := p.Registrations(); n != 2 {
				t.Errorf("plugin counted %d registrations, want 2", n)
			}
		})
	}
}

func TestRetriesUntilKubeletListens(t *testing.T) {
	dir := tempDir(t)
	p, _ := startPlugin(t, Config{Count: 1, Dir: dir, CheckInterval: 10 * time.Millisecond})
	waitFor(t, "plugin socket", func() bool { _, err := os.Stat(filepath.Join(dir, p.cfg.SocketName)); return err == nil })
	kubelet := startFakeKubelet(t, dir)
	waitFor(t, "registration once the kubelet listens", func() bool { return len(kubelet.registrations()) == 1 })
}

func TestDeviceIDs(t *testing.T) {
	a, b := DeviceIDs("node-a", 8), DeviceIDs("node-b", 8)
	all := map[string]bool{}
	for _, id := range append(a, b...) {
		all[id] = true
	}
	if len(all) != 16 {
		t.Errorf("16 ids over two nodes, %d distinct", len(all))
	}
	if again := DeviceIDs("node-a", 8); strings.Join(again, ",") != strings.Join(a, ",") {
		t.Errorf("ids changed between calls: %v then %v", a, again)
	}
}
