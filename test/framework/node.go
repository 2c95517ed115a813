package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A real node: containerd, runc and the kubelet on this machine, with pods on
// a bridge the node makes. Every path and name is fixed, so that a run can
// clean up what a crashed run left; the kubelet's device plugin directory is
// fixed anyway, so there is one such node per machine.
const (
	// BinKubelet is built by `hack/tools/build.sh node`.
	BinKubelet = "kubelet"
	// NodeBridge and NodeBridgeCIDR are the pods' network. Nothing else on
	// the machine uses them (checked before it is created), and a FORWARD
	// rule drops everything from it to any other interface.
	NodeBridge     = "gpt-node0"
	NodeBridgeCIDR = "10.88.0.1/16"
	// NodeIP is the node's InternalIP: the kubelet refuses a loopback one.
	NodeIP = "10.88.0.1"
	// NodeImage is the one image the node runs, built by BuildNodeImage and
	// imported into containerd. Its registry is a closed loopback port, so an
	// accidental pull fails on this machine instead of reaching out.
	NodeImage = "127.0.0.1:1/gputask/pause:local"
	// WorkerImage is test/node/worker, an inference server's stand-in,
	// built by BuildGoImage; its registry is closed like NodeImage's.
	WorkerImage = "127.0.0.1:1/gputask/worker:local"

	nodeDataDir   = "/var/lib/gputask-node"
	nodeStateDir  = "/run/gputask-node"
	nodeRuleTag   = "gputask-node"
	kubeletPort   = 10250
	nodeCNIBinDir = "/usr/lib/cni"
	// devicePluginDir is where the kubelet always listens for device
	// plugins, whatever its root directory.
	devicePluginDir = "/var/lib/kubelet/device-plugins"
)

// nodeSysctls are what the kubelet (the first three) and the bridge CNI
// plugin (ip_forward) change on the host; they are saved before and restored
// after.
var nodeSysctls = []string{"vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops", "net.ipv4.ip_forward"}

// NodeOptions describes the real node.
type NodeOptions struct {
	// Name is the Node's name.
	Name string
	// Labels are added to the Node, such as nvidia.com/gpu.product=A100.
	Labels map[string]string
	// Image is the path of an OCI archive to import (BuildNodeImage).
	Image string
}

// Node is a running real node.
type Node struct {
	Name string
	// Dir holds the configuration and data of the node's processes, and is
	// removed with the node; LogDir, in the control plane's directory, is
	// kept with it when a test fails.
	Dir, LogDir string
	// ContainerdSocket is containerd's address, for ctr.
	ContainerdSocket string

	cp         *ControlPlane
	opts       NodeOptions
	containerd *Process
	kubelet    *Process
	// owned are processes that run on the node, such as its device plugin;
	// they stop before the kubelet.
	owned []*Process
}

// Own makes Stop stop p, before the kubelet.
func (n *Node) Own(p *Process) { n.owned = append(n.owned, p) }

func runHost(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// CheckNodeHost fails unless the machine can run the node: root, the
// runtime from hack/node/install.sh, and the bridge's name and range free.
func CheckNodeHost() error {
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root")
	}
	for _, c := range []string{"containerd", "ctr", "runc", "iptables", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("%s is missing: run hack/node/install.sh", c)
		}
	}
	if _, err := os.Stat(filepath.Join(nodeCNIBinDir, "bridge")); err != nil {
		return fmt.Errorf("the CNI plugins are missing: run hack/node/install.sh: %w", err)
	}
	_, bridgeNet, _ := net.ParseCIDR(NodeBridgeCIDR)
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, iface := range ifaces {
		if iface.Name == NodeBridge {
			continue // left by a crashed run; CleanupNodeHost removes it
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (bridgeNet.Contains(ipn.IP) || ipn.Contains(bridgeNet.IP)) {
				return fmt.Errorf("%s on %s overlaps the node's bridge %s", ipn, iface.Name, NodeBridgeCIDR)
			}
		}
	}
	return nil
}

// StartNode cleans up what an earlier run left, sets the host up, and starts
// containerd and the kubelet registered with cp, which must have been started
// with Options.KubeletClient. It waits for the Node to be Ready. On error
// everything is torn down again.
func StartNode(ctx context.Context, cp *ControlPlane, opts NodeOptions) (n *Node, err error) {
	if !cp.opts.KubeletClient {
		return nil, errors.New("the control plane needs Options.KubeletClient for a real node")
	}
	if err := CheckBinaries(cp.BinDir, BinKubelet); err != nil {
		return nil, err
	}
	if err := CheckNodeHost(); err != nil {
		return nil, err
	}
	CleanupNodeHost(cp.logf)
	n = &Node{Name: opts.Name, Dir: nodeDataDir, LogDir: filepath.Join(cp.Dir, "node"), ContainerdSocket: filepath.Join(nodeStateDir, "containerd.sock"), cp: cp, opts: opts}
	defer func() {
		if err != nil {
			n.Stop(context.Background())
		}
	}()
	for _, d := range []string{nodeDataDir, nodeStateDir, n.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return n, err
		}
	}
	if err := saveSysctls(); err != nil {
		return n, err
	}
	if err := setUpNodeNetwork(); err != nil {
		return n, err
	}
	if err := setUpServiceNAT(cp.APIServerURL); err != nil {
		return n, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	if opts.Image != "" {
		if err := n.ImportImage(opts.Image); err != nil {
			return n, err
		}
	}
	if err := n.startKubelet(opts); err != nil {
		return n, err
	}
	started := time.Now()
	if _, err := cp.WaitNodeReady(ctx, n.Name); err != nil {
		return n, fmt.Errorf("waiting for node %s: %w (kubelet log %s)", n.Name, err, n.kubelet.LogPath)
	}
	cp.logf("node %s Ready after %s", n.Name, time.Since(started).Round(time.Millisecond))
	return n, nil
}

// setUpNodeNetwork creates the bridge and the rule that keeps whatever a pod
// sends on this machine.
func setUpNodeNetwork() error {
	for _, args := range [][]string{
		{"link", "add", NodeBridge, "type", "bridge"},
		{"addr", "add", NodeBridgeCIDR, "dev", NodeBridge},
		{"link", "set", NodeBridge, "up"},
	} {
		if err := runHost("ip", args...); err != nil {
			return err
		}
	}
	return runHost("iptables", append([]string{"-I", "FORWARD", "1"}, forwardDropRule()...)...)
}

// setUpServiceNAT lets pods reach the API server at the kubernetes Service's
// ClusterIP, as in-cluster clients do, without kube-proxy: one DNAT rule for
// packets that come in on the bridge, to the API server's loopback address,
// and route_localnet on the bridge only (the bridge, and with it the
// setting, is deleted at cleanup).
func setUpServiceNAT(apiServerURL string) error {
	u, err := url.Parse(apiServerURL)
	if err != nil {
		return err
	}
	if err := os.WriteFile(sysctlPath("net.ipv4.conf."+NodeBridge+".route_localnet"), []byte("1"), 0o644); err != nil {
		return err
	}
	return runHost("iptables", "-t", "nat", "-I", "PREROUTING", "1", "-i", NodeBridge, "-d", KubernetesServiceIP+"/32",
		"-p", "tcp", "--dport", "443", "-m", "comment", "--comment", nodeRuleTag, "-j", "DNAT", "--to-destination", "127.0.0.1:"+u.Port())
}

// deleteNATRules deletes every rule of the nat table's PREROUTING chain
// that carries the node's tag, whatever port it points to.
func deleteNATRules(logf func(string, ...any)) {
	out, err := exec.Command("iptables", "-t", "nat", "-S", "PREROUTING").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "-A PREROUTING ") || !strings.Contains(line, nodeRuleTag) {
			continue
		}
		args := append([]string{"-t", "nat", "-D"}, strings.Fields(strings.TrimPrefix(line, "-A "))...)
		for i, a := range args {
			args[i] = strings.Trim(a, `"`)
		}
		if err := runHost("iptables", args...); err != nil {
			logf("cleanup: %v", err)
		}
	}
}

func forwardDropRule() []string {
	return []string{"-i", NodeBridge, "!", "-o", NodeBridge, "-m", "comment", "--comment", nodeRuleTag, "-j", "DROP"}
}

// ImportImage imports an image archive (OCI or docker) into the node's
// containerd, for containers with imagePullPolicy Never.
func (n *Node) ImportImage(path string) error {
	return n.ctr("images", "import", path)
}

func (n *Node) ctr(args ...string) error {
	return runHost("ctr", append([]string{"--address", n.ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
}

func (n *Node) startContainerd(ctx context.Context) error {
	cniConf := filepath.Join(nodeDataDir, "cni", "net.d")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	// The bridge plugin with host-local addresses: no masquerading, so a pod
	// that got past the FORWARD rule still could not answer from outside.
	// Pods have a route to the Service range only (through the bridge, where
	// the API server's address is translated), none to anywhere else.
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "gputask-node",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": "10.88.0.0/16", "rangeStart": "10.88.0.10", "gateway": %q}]],
      "routes": [{"dst": %q}]
    }
  }]
}`, NodeBridge, filepath.Join(nodeDataDir, "cni", "ipam"), NodeIP, ServiceClusterIPRange)
	if err := os.WriteFile(filepath.Join(cniConf, "10-gputask.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	// restrict_oom_score_adj: a sandbox asks for -998, which a process
	// without CAP_SYS_RESOURCE (a container or a sandboxed VM running the
	// tests) may not set; runc's init then dies before it reports its PID.
	// The scores are kept no lower than containerd's own. The pods' network
	// namespaces are mounted under containerd's state, not /run/netns, so
	// that the cleanup of that directory finds them after a crash.
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
      Root = %q
`, filepath.Join(nodeDataDir, "containerd"), filepath.Join(nodeStateDir, "containerd"),
		n.ContainerdSocket, n.ContainerdSocket+".ttrpc", NodeImage, nodeCNIBinDir, cniConf,
		filepath.Join(nodeStateDir, "runc"))
	configPath := filepath.Join(nodeDataDir, "containerd.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	p, err := StartProcess("containerd", filepath.Join(n.LogDir, "containerd.log"), "containerd", []string{"--config", configPath})
	if err != nil {
		return err
	}
	n.containerd = p
	return p.waitReady(ctx, componentStartTimeout, func(context.Context) bool {
		return n.ctr("version") == nil
	})
}

func (n *Node) startKubelet(opts NodeOptions) error {
	dir := filepath.Join(nodeDataDir, "kubelet-config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	certPEM, keyPEM, err := n.cp.pki.clientCertificate("system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: n.cp.APIServerURL, CertificateAuthorityData: n.cp.pki.CACertPEM}
	cfg.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "kubelet"}
	cfg.CurrentContext = "local"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return err
	}
	// Pods get no name servers: nothing they could reach answers.
	resolvConf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolvConf, nil, 0o644); err != nil {
		return err
	}
	healthzPort, err := FreePort()
	if err != nil {
		return err
	}
	// failCgroupV1 and cgroupfs: this machine has cgroup v1 and no systemd.
	// The image thresholds keep the imported images, which cannot be pulled
	// again; the eviction thresholds keep a busy test disk from evicting.
	// The lease, renewed every quarter of its duration (2 s), keeps the node
	// alive for a node lifecycle controller of a short grace period.
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %s
authorization:
  mode: AlwaysAllow
resolvConf: %s
podLogsDir: %s
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
nodeStatusUpdateFrequency: 2s
nodeLeaseDurationSeconds: 8
syncFrequency: 5s
`, NodeIP, kubeletPort, healthzPort, n.ContainerdSocket, n.cp.pki.CACert, resolvConf, filepath.Join(nodeDataDir, "pod-logs"))
	configPath := filepath.Join(dir, "kubelet.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	var labels []string
	for k, v := range opts.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	args := []string{
		"--config=" + configPath,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + filepath.Join(nodeDataDir, "kubelet"),
		"--cert-dir=" + filepath.Join(dir, "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + NodeIP,
		"--node-labels=" + strings.Join(labels, ","),
		"--v=2",
	}
	p, err := StartProcess(BinKubelet, filepath.Join(n.LogDir, "kubelet.log"), filepath.Join(n.cp.BinDir, BinKubelet), args)
	if err != nil {
		return err
	}
	n.kubelet = p
	return nil
}

// StopKubelet stops the kubelet alone, as a crash or an upgrade of it
// would: containerd and the pods' containers go on running.
func (n *Node) StopKubelet() {
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
}

// StartKubelet starts the kubelet again after StopKubelet (or stops it
// first), and waits for its Node to be Ready. A kubelet registers its Node
// when it starts, so this also brings back a Node that was deleted.
func (n *Node) StartKubelet(ctx context.Context) error {
	n.StopKubelet()
	// The Node may still say Ready from before: only a status the new
	// kubelet posted counts, and its first one always goes out.
	started := metav1.NewTime(time.Now().Truncate(time.Second))
	if err := n.startKubelet(n.opts); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeReadyTimeout, true, func(ctx context.Context) (bool, error) {
		node, err := n.cp.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Before(&started), nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to be Ready again: %w (kubelet log %s)", n.Name, err, n.kubelet.LogPath)
	}
	return nil
}

// KubeletLog is the kubelet's log file.
func (n *Node) KubeletLog() string { return filepath.Join(n.LogDir, "kubelet.log") }

// Stop tears the node down in order: the pods on it (while the kubelet still
// runs, so that it stops their containers and frees their addresses), the
// kubelet, containerd, then the host as CleanupNodeHost leaves it. Owners of
// the pods (GPUTasks) are the caller's to delete first, or they would place
// the pods again.
func (n *Node) Stop(ctx context.Context) {
	if n.kubelet != nil && !n.kubelet.Exited() {
		n.deletePods(ctx)
	}
	for _, p := range n.owned {
		p.Stop()
	}
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
	if n.containerd != nil {
		n.containerd.Stop()
	}
	CleanupNodeHost(n.cp.logf)
	if err := n.cp.Kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
		n.cp.logf("deleting node %s: %v", n.Name, err)
	}
}

func (n *Node) deletePods(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name}
	pods, err := n.cp.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, sel)
	if err != nil {
		n.cp.logf("listing pods on %s: %v", n.Name, err)
		return
	}
	grace := int64(5)
	for _, p := range pods.Items {
		_ = n.cp.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := n.cp.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, sel)
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		n.cp.logf("pods left on %s: %v", n.Name, err)
	}
}

// CleanupNodeHost undoes everything StartNode does to the host, whatever a
// crashed run left: containers, mounts, the FORWARD rule, the bridge, the
// sysctls, the node's directories. Each step ignores what is already gone,
// so it is safe to repeat. It never stops a process other than the
// containers and shims of the node's own containerd.
func CleanupNodeHost(logf func(string, ...any)) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	runcRoot := filepath.Join(nodeStateDir, "runc", "k8s.io")
	if out, err := exec.Command("runc", "--root", runcRoot, "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			if err := runHost("runc", "--root", runcRoot, "delete", "--force", id); err != nil {
				logf("cleanup: %v", err)
			}
		}
	}
	killOwnShims(logf)
	unmountUnder(logf, nodeDataDir, nodeStateDir, "/var/lib/kubelet")
	for runHost("iptables", append([]string{"-D", "FORWARD"}, forwardDropRule()...)...) == nil {
	}
	deleteNATRules(logf)
	if _, err := net.InterfaceByName(NodeBridge); err == nil {
		if err := runHost("ip", "link", "delete", NodeBridge); err != nil {
			logf("cleanup: %v", err)
		}
	}
	if err := restoreSysctls(); err != nil {
		logf("cleanup: %v", err)
	}
	removeNodeCgroups(logf)
	for _, d := range []string{nodeStateDir, nodeDataDir, devicePluginDir} {
		if err := os.RemoveAll(d); err != nil {
			logf("cleanup: %v", err)
		}
	}
	// The kubelet makes /var/lib/kubelet for its device plugin directory;
	// remove it only if nothing else is in it.
	_ = os.Remove("/var/lib/kubelet")
}

// removeNodeCgroups removes the kubelet's kubepods cgroups (cgroupfs driver)
// and containerd's k8s.io ones, deepest first, on a cgroup v1 host and on a
// cgroup v2 one alike. A cgroup that still holds a process stays, and is
// named.
func removeNodeCgroups(logf func(string, ...any)) {
	for _, d := range nodeCgroups("/sys/fs/cgroup") {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			logf("cleanup: removing cgroup %s: %v", d, err)
		}
	}
}

// nodeCgroups lists the node's cgroups below the cgroup mount fsroot,
// deepest first, so that each can be removed after its children. Under
// cgroup v1 each controller has its hierarchy (fsroot/cpu/kubepods, …);
// under v2 (fsroot/cgroup.controllers exists) there is one, and the
// kubelet's and containerd's cgroups sit at its top (fsroot/kubepods,
// fsroot/k8s.io).
func nodeCgroups(fsroot string) []string {
	var roots []string
	for _, name := range []string{"kubepods", "k8s.io"} {
		v1, _ := filepath.Glob(filepath.Join(fsroot, "*", name))
		roots = append(roots, v1...)
		if _, err := os.Stat(filepath.Join(fsroot, "cgroup.controllers")); err == nil {
			roots = append(roots, filepath.Join(fsroot, name))
		}
	}
	var dirs []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	sort.SliceStable(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// killOwnShims kills the containerd shims started for the node's containerd,
// found by the address in their command line; a crashed containerd leaves
// them running.
func killOwnShims(logf func(string, ...any)) {
	entries, _ := os.ReadDir("/proc")
	own := filepath.Join(nodeStateDir, "containerd.sock")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := range args[:len(args)-1] {
			if args[i] == "-address" && args[i+1] == own {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					logf("cleanup: killing shim %d: %v", pid, err)
				}
			}
		}
	}
}

// unmountUnder unmounts every mount under the given directories, deepest
// first, so that no parent is busy with a child mount.
func unmountUnder(logf func(string, ...any), dirs ...string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		logf("cleanup: %v", err)
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		// Spaces in mount points are escaped as \040.
		p := strings.ReplaceAll(fields[4], `\040`, " ")
		for _, d := range dirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				points = append(points, p)
			}
		}
	}
	sort.Slice(points, func(i, j int) bool { return strings.Count(points[i], "/") > strings.Count(points[j], "/") })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			logf("cleanup: unmounting %s: %v", p, err)
		}
	}
}

// sysctlSaved holds the host's values until they are restored; it is not in
// the node's directories, which a cleanup removes before the restore.
const sysctlSaved = "/run/gputask-node.sysctl"

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// saveSysctls records the host's values once: a crashed run's file is kept,
// since it holds the values from before that run.
func saveSysctls() error {
	if _, err := os.Stat(sysctlSaved); err == nil {
		return nil
	}
	var b strings.Builder
	for _, name := range nodeSysctls {
		v, err := os.ReadFile(sysctlPath(name))
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		fmt.Fprintf(&b, "%s=%s\n", name, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(sysctlSaved, []byte(b.String()), 0o644)
}

func restoreSysctls() error {
	data, err := os.ReadFile(sysctlSaved)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if err := os.WriteFile(sysctlPath(name), []byte(value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return os.Remove(sysctlSaved)
}

// PodDevices reads the device ids a pod's container was given, from what
// the node image prints at start.
func (n *Node) PodDevices(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	raw, err := n.cp.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "NVIDIA_VISIBLE_DEVICES="); ok {
			if v == "" {
				return nil, nil
			}
			return strings.Split(v, ","), nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s printed no NVIDIA_VISIBLE_DEVICES", pod.Namespace, pod.Name)
}

// addKubeletClientArgs gives kube-apiserver, when Options.KubeletClient asks,
// the flags for reaching real kubelets: at their InternalIP, the node's
// bridge address, with a client certificate that the kubelets' client CA
// (the control plane's CA) accepts. They go before any ExtraArgs, which win.
func (cp *ControlPlane) addKubeletClientArgs() error {
	if !cp.opts.KubeletClient {
		return nil
	}
	certPEM, keyPEM, err := cp.pki.clientCertificate("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return fmt.Errorf("kubelet client certificate: %w", err)
	}
	cert, key := filepath.Join(cp.Dir, "kubelet-client.crt"), filepath.Join(cp.Dir, "kubelet-client.key")
	if err := writePair(cert, certPEM, key, keyPEM); err != nil {
		return err
	}
	extra := map[string][]string{}
	for name, args := range cp.opts.ExtraArgs {
		extra[name] = args
	}
	extra[BinAPIServer] = append([]string{
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate=" + cert,
		"--kubelet-client-key=" + key,
	}, cp.opts.ExtraArgs[BinAPIServer]...)
	cp.opts.ExtraArgs = extra
	return nil
}
