package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	"github.com/gputask/gputask-controller/test/kwok"
)

// Timeouts for the components to come up. They are generous because the
// machine that runs the tests may be busy compiling.
const (
	etcdStartTimeout      = 60 * time.Second
	apiServerStartTimeout = 120 * time.Second
	componentStartTimeout = 90 * time.Second
	// startAttempts covers the small race between picking a free port and the
	// component binding it: a component that fails to bind is started again
	// on other ports.
	startAttempts = 3
)

// ServiceClusterIPRange is the apiserver's Service IP range. Nothing routes
// it but the one DNAT rule a real node adds for the kubernetes Service.
const ServiceClusterIPRange = "10.0.0.0/24"

// KubernetesServiceIP is the ClusterIP the API server gives the kubernetes
// Service, the first of ServiceClusterIPRange; its serving certificate names
// it, and pods on a real node reach it (StartNode).
const KubernetesServiceIP = "10.0.0.1"

// PodCIDR is the range kwok gives fake pod IPs from.
const PodCIDR = "10.244.0.0/16"

// KwokNodeLabel is the label (key=value) that makes kwok manage a node.
const KwokNodeLabel = "type=kwok"

// DefaultControllers are the kube-controller-manager controllers started when
// Options.Controllers is empty: the garbage collector (owner references), the
// namespace controller (namespace deletion), the ServiceAccount and root CA
// publishers (what pods in a new namespace expect), and the pod garbage
// collector (pods on deleted nodes).
var DefaultControllers = []string{
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"root-ca-certificate-publisher-controller",
	"pod-garbage-collector-controller",
	// Makes the ResourceClaims of pods that refer to ResourceClaimTemplates
	// (Dynamic Resource Allocation) and removes them with their pods.
	"resourceclaim-controller",
}

// Options says which components to run besides etcd and kube-apiserver.
type Options struct {
	// Scheduler starts kube-scheduler.
	Scheduler bool
	// ControllerManager starts kube-controller-manager with Controllers.
	ControllerManager bool
	// Controllers overrides DefaultControllers.
	Controllers []string
	// Kwok starts kwok, which manages the nodes labelled type=kwok.
	Kwok bool
	// SkipCRDs leaves the gputask.io CRDs uninstalled.
	SkipCRDs bool
	// AggregationLayer gives kube-apiserver a front-proxy CA, client
	// certificate and requestheader flags, so that it proxies to extension
	// API servers registered with RegisterAPIService (aggregation.go).
	AggregationLayer bool
	// ExtraArgs adds flags to a component, keyed by binary name (BinAPIServer,
	// BinControllerManager, ...), after the harness's own so they win; for
	// example {"kube-controller-manager": {"--node-monitor-grace-period=10s"}}.
	ExtraArgs map[string][]string
	// KubeletClient gives kube-apiserver a client certificate for kubelets
	// and makes it reach them at their InternalIP, as a real node needs for
	// logs and exec (see StartNode).
	KubeletClient bool
	// Dir is where data, certificates and logs go; empty means a new
	// temporary directory, which Cleanup removes.
	Dir string
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	// Dir holds etcd's data, the certificates, the kubeconfig and one log
	// file per process.
	Dir string
	// Root is the repository root and BinDir the directory of the binaries.
	Root, BinDir string
	// KubeconfigPath is an admin (system:masters) kubeconfig for the apiserver.
	KubeconfigPath string
	// Config is the admin's REST config.
	Config *rest.Config
	// Kube, GPUTask and APIExtensions are admin clients.
	Kube          kubernetes.Interface
	GPUTask       versioned.Interface
	APIExtensions apiextensionsclient.Interface

	// EtcdURL and APIServerURL are where etcd and kube-apiserver listen.
	EtcdURL, APIServerURL string

	opts       Options
	ownsDir    bool
	pki        *pki
	httpClient *http.Client

	mu      sync.Mutex
	procs   []*Process
	nextLog map[string]int
	stopped bool
}

// Start runs etcd and kube-apiserver, installs the CRDs, and starts the
// components opts asks for. On error everything already started is stopped;
// the directory is kept for its logs and named in the error.
func Start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	cp, err = newControlPlane(opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cp.Stop()
			err = fmt.Errorf("%w (logs in %s)", err, cp.Dir)
		}
	}()
	started := time.Now()
	if err := cp.startEtcd(ctx); err != nil {
		return cp, err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		return cp, err
	}
	cp.logf("kube-apiserver ready at %s after %s", cp.APIServerURL, time.Since(started).Round(time.Millisecond))
	// CRDs go in before kube-controller-manager starts, so that the garbage
	// collector's first discovery already watches GPUTasks and GPUTaskSets.
	if !opts.SkipCRDs {
		if err := cp.InstallCRDs(ctx); err != nil {
			return cp, err
		}
	}
	if err := cp.startComponents(ctx); err != nil {
		return cp, err
	}
	cp.logf("control plane ready after %s (dir %s)", time.Since(started).Round(time.Millisecond), cp.Dir)
	return cp, nil
}

func newControlPlane(opts Options) (*ControlPlane, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	binDir := BinDir(root)
	if err := CheckBinaries(binDir, requiredBinaries(opts)...); err != nil {
		return nil, err
	}
	cp := &ControlPlane{Root: root, BinDir: binDir, opts: opts, nextLog: map[string]int{}}
	if opts.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "gputask-cp-"); err != nil {
			return nil, fmt.Errorf("creating the control plane directory: %w", err)
		}
		cp.ownsDir = true
	} else {
		cp.Dir = opts.Dir
		if err := os.MkdirAll(cp.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating the control plane directory: %w", err)
		}
	}
	if cp.pki, err = newPKI(cp.Dir); err != nil {
		return nil, fmt.Errorf("creating certificates: %w", err)
	}
	if opts.AggregationLayer {
		if err := cp.pki.addFrontProxy(cp.Dir); err != nil {
			return nil, fmt.Errorf("creating front-proxy certificates: %w", err)
		}
	}
	if err := cp.addKubeletClientArgs(); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.pki.CACertPEM)
	cp.httpClient = &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	return cp, nil
}

func requiredBinaries(opts Options) []string {
	names := []string{BinEtcd, BinAPIServer, BinKubectl}
	if opts.Scheduler {
		names = append(names, BinScheduler)
	}
	if opts.ControllerManager {
		names = append(names, BinControllerManager)
	}
	if opts.Kwok {
		names = append(names, BinKwok)
	}
	return names
}

func (cp *ControlPlane) logf(format string, args ...any) {
	if cp.opts.Logf != nil {
		cp.opts.Logf(format, args...)
	}
}

// startEtcd runs a single-member etcd without fsync: the data is thrown away
// with the test, and fsync is most of etcd's latency on a busy disk.
func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	return retryStart(func() (bool, error) {
		clientPort, peerPort, err := freePort2()
		if err != nil {
			return false, err
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		dataDir := filepath.Join(cp.Dir, "etcd")
		if err := os.RemoveAll(dataDir); err != nil {
			return false, fmt.Errorf("clearing etcd data: %w", err)
		}
		p, err := cp.startProcess(BinEtcd, nil,
			"--name=default",
			"--data-dir="+dataDir,
			"--listen-client-urls="+clientURL,
			"--advertise-client-urls="+clientURL,
			"--listen-peer-urls="+peerURL,
			"--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=default="+peerURL,
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		)
		if err != nil {
			return false, err
		}
		err = p.waitReady(ctx, etcdStartTimeout, func(ctx context.Context) bool {
			body, err := cp.get(ctx, clientURL+"/health")
			return err == nil && strings.Contains(body, `"health":"true"`)
		})
		if err != nil {
			p.Stop()
			return errors.Is(err, errExited), err
		}
		cp.EtcdURL = clientURL
		return false, nil
	})
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	return retryStart(func() (bool, error) {
		port, err := FreePort()
		if err != nil {
			return false, err
		}
		host := "https://127.0.0.1:" + strconv.Itoa(port)
		args := []string{
			"--etcd-servers=" + cp.EtcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			// Since 1.37 the API server refuses to publish a loopback
			// address in the kubernetes Service's endpoints; nothing here
			// reaches the API server through that Service.
			"--endpoint-reconciler-type=none",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(cp.Dir, "apiserver-certs"),
			"--tls-cert-file=" + cp.pki.ServingCert,
			"--tls-private-key-file=" + cp.pki.ServingKey,
			"--client-ca-file=" + cp.pki.CACert,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + cp.pki.SAPublicKey,
			"--service-account-signing-key-file=" + cp.pki.SAPrivateKey,
			"--authorization-mode=Node,RBAC",
			"--service-cluster-ip-range=" + ServiceClusterIPRange,
			// See the package documentation for why.
			"--disable-admission-plugins=TaintNodesByCondition",
			"--profiling=false",
			"--v=1",
		}
		p, err := cp.startProcess(BinAPIServer, nil, append(args, cp.aggregationArgs()...)...)
		if err != nil {
			return false, err
		}
		if err := cp.setupClients(host); err != nil {
			p.Stop()
			return false, err
		}
		err = p.waitReady(ctx, apiServerStartTimeout, func(ctx context.Context) bool {
			body, err := cp.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err == nil && string(body) == "ok"
		})
		if err != nil {
			p.Stop()
			return errors.Is(err, errExited), err
		}
		cp.APIServerURL = host
		return false, nil
	})
}

// setupClients writes the admin kubeconfig for host and builds the clients.
func (cp *ControlPlane) setupClients(host string) error {
	const name = "gputask-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: cp.pki.CACertPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cp.pki.AdminCertPEM, ClientKeyData: cp.pki.AdminKeyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	cp.KubeconfigPath = filepath.Join(cp.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, cp.KubeconfigPath); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	restConfig, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	// Tests create objects in bursts; the client-side default of 5 QPS would
	// make them measure the rate limiter instead of the controller.
	restConfig.QPS, restConfig.Burst = 200, 400
	cp.Config = restConfig
	if cp.Kube, err = kubernetes.NewForConfig(restConfig); err != nil {
		return fmt.Errorf("building the kubernetes client: %w", err)
	}
	if cp.GPUTask, err = versioned.NewForConfig(restConfig); err != nil {
		return fmt.Errorf("building the gputask client: %w", err)
	}
	if cp.APIExtensions, err = apiextensionsclient.NewForConfig(restConfig); err != nil {
		return fmt.Errorf("building the apiextensions client: %w", err)
	}
	return nil
}

// component is an optional component's start and its readiness check.
type component struct {
	start func() (*Process, int, error)
	ready func(p *Process, port int) error
}

// startComponents starts the optional components together, then waits for
// each, so that their start-up times overlap. One that dies before it is
// ready (most likely because another process took its port between
// FreePort and its bind) is started again on another port, as etcd and the
// API server are.
func (cp *ControlPlane) startComponents(ctx context.Context) error {
	var components []component
	if cp.opts.Scheduler {
		components = append(components, component{
			start: func() (*Process, int, error) { return cp.startSecureComponent(BinScheduler, nil) },
			ready: func(p *Process, port int) error { return cp.waitHealthz(ctx, p, port) },
		})
	}
	if cp.opts.ControllerManager {
		controllers := cp.opts.Controllers
		if len(controllers) == 0 {
			controllers = DefaultControllers
		}
		components = append(components, component{
			start: func() (*Process, int, error) {
				return cp.startSecureComponent(BinControllerManager, []string{
					"--controllers=" + strings.Join(controllers, ","),
					"--root-ca-file=" + cp.pki.CACert,
					"--service-account-private-key-file=" + cp.pki.SAPrivateKey,
					"--use-service-account-credentials=false",
				})
			},
			ready: func(p *Process, port int) error { return cp.waitHealthz(ctx, p, port) },
		})
	}
	if cp.opts.Kwok {
		components = append(components, component{
			start: cp.startKwok,
			ready: func(p *Process, port int) error {
				return p.waitReady(ctx, componentStartTimeout, func(ctx context.Context) bool {
					body, err := cp.get(ctx, "http://127.0.0.1:"+strconv.Itoa(port)+"/healthz")
					return err == nil && strings.TrimSpace(body) == "ok"
				})
			},
		})
	}
	type started struct {
		p    *Process
		port int
	}
	first := make([]started, len(components))
	for i, c := range components {
		p, port, err := c.start()
		if err != nil {
			return err
		}
		first[i] = started{p, port}
	}
	for i, c := range components {
		if err := c.readyOrStartAgain(first[i].p, first[i].port); err != nil {
			return err
		}
	}
	return nil
}

// readyOrStartAgain waits for the component started as p on port, and
// starts it again while it dies before it is ready, up to startAttempts
// starts in all.
func (c component) readyOrStartAgain(p *Process, port int) error {
	attempt := 0
	return retryStart(func() (bool, error) {
		if attempt++; attempt > 1 {
			var err error
			if p, port, err = c.start(); err != nil {
				return false, err
			}
		}
		if err := c.ready(p, port); err != nil {
			p.Stop()
			return errors.Is(err, errExited), err
		}
		return false, nil
	})
}

// startSecureComponent starts kube-scheduler or kube-controller-manager as
// admin, serving its health and metrics on a loopback port with a certificate
// from the test CA.
func (cp *ControlPlane) startSecureComponent(name string, extra []string) (*Process, int, error) {
	port, err := FreePort()
	if err != nil {
		return nil, 0, err
	}
	args := append([]string{
		"--kubeconfig=" + cp.KubeconfigPath,
		"--authentication-kubeconfig=" + cp.KubeconfigPath,
		"--authorization-kubeconfig=" + cp.KubeconfigPath,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + cp.pki.ServingCert,
		"--tls-private-key-file=" + cp.pki.ServingKey,
		"--profiling=false",
		"--v=1",
	}, extra...)
	p, err := cp.startProcess(name, nil, args...)
	return p, port, err
}

func (cp *ControlPlane) waitHealthz(ctx context.Context, p *Process, port int) error {
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	return p.waitReady(ctx, componentStartTimeout, func(ctx context.Context) bool {
		body, err := cp.get(ctx, url)
		return err == nil && body == "ok"
	})
}

// startKwok runs kwok with the Stage files of test/kwok on the nodes labelled
// type=kwok. Its server (health only) is bound to loopback explicitly: left
// unset, kwok may listen on 0.0.0.0.
func (cp *ControlPlane) startKwok() (*Process, int, error) {
	stageDir := filepath.Join(cp.Dir, "kwok")
	if err := os.MkdirAll(stageDir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("creating kwok directory: %w", err)
	}
	stages, err := kwok.WriteStages(stageDir)
	if err != nil {
		return nil, 0, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, 0, err
	}
	args := []string{
		"--kubeconfig=" + cp.KubeconfigPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + KwokNodeLabel,
		"--node-ip=127.0.0.1",
		"--cidr=" + PodCIDR,
		// Leases as a kubelet keeps them, so that a node lifecycle controller,
		// if a test enables it, sees live nodes.
		"--node-lease-duration-seconds=40",
		"--server-address=127.0.0.1:" + strconv.Itoa(port),
	}
	for _, stage := range stages {
		args = append(args, "-c", stage)
	}
	// kwok looks for its default configuration under $HOME; keep it away from
	// the user's real home.
	p, err := cp.startProcess(BinKwok, []string{"HOME=" + stageDir}, args...)
	return p, port, err
}

// startProcess starts bin/<name>, with Options.ExtraArgs[name] appended, a
// fresh log file, and records it for Stop.
func (cp *ControlPlane) startProcess(name string, env []string, args ...string) (*Process, error) {
	args = append(args, cp.opts.ExtraArgs[name]...)
	return cp.startBinary(name, filepath.Join(cp.BinDir, name), env, args...)
}

func (cp *ControlPlane) startBinary(name, path string, env []string, args ...string) (*Process, error) {
	cp.mu.Lock()
	n := cp.nextLog[name]
	cp.nextLog[name] = n + 1
	cp.mu.Unlock()
	logName := name + ".log"
	if n > 0 {
		logName = fmt.Sprintf("%s-%d.log", name, n)
	}
	p, err := StartProcess(name, filepath.Join(cp.Dir, logName), path, args, env...)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	return p, nil
}

// Process returns the most recently started process of that binary name
// (BinKwok, BinController, ...), or nil; a fault test stops kwok with it to
// make its nodes go silent.
func (cp *ControlPlane) Process(name string) *Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for i := len(cp.procs) - 1; i >= 0; i-- {
		if cp.procs[i].Name == name {
			return cp.procs[i]
		}
	}
	return nil
}

// Stopped reports whether Stop has been called.
func (cp *ControlPlane) Stopped() bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.stopped
}

// Processes returns every process started so far, in start order.
func (cp *ControlPlane) Processes() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]*Process(nil), cp.procs...)
}

// Stop stops every process in the reverse order of their start, so that
// clients go before the apiserver and the apiserver before etcd.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	procs := cp.procs
	cp.procs = nil
	cp.stopped = true
	cp.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
}

// Cleanup stops everything and removes the directory, unless keep is set or
// the directory was given in Options. It returns the directory when kept.
func (cp *ControlPlane) Cleanup(keep bool) (keptDir string) {
	cp.Stop()
	if keep || !cp.ownsDir {
		return cp.Dir
	}
	if err := os.RemoveAll(cp.Dir); err != nil {
		cp.logf("removing %s: %v", cp.Dir, err)
		return cp.Dir
	}
	return ""
}

// get fetches url with the test CA trusted and returns the body.
func (cp *ControlPlane) get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := cp.httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}

// retryStart runs start until it succeeds, returns a non-retriable error, or
// runs out of attempts. start reports whether its error is worth a retry (the
// process died, most likely because another process took its port).
func retryStart(start func() (retry bool, err error)) error {
	var err error
	for range startAttempts {
		var retry bool
		if retry, err = start(); err == nil || !retry {
			return err
		}
	}
	return err
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// process a test starts, such as the controller's
// --metrics-bind-address=127.0.0.1:<port>.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePort2 returns two distinct free ports, holding the first while picking
// the second.
func freePort2() (int, int, error) {
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l1.Close()
	p2, err := FreePort()
	if err != nil {
		return 0, 0, err
	}
	return l1.Addr().(*net.TCPAddr).Port, p2, nil
}
