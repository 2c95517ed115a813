// Command demo runs gputask-controller on a local control plane with fake GPU
// nodes and shows tasks, pods and GPUs live, refreshed every second. It is
// what `make demo` runs, after make has built the control plane and the
// controller into bin/.
//
// It starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager and
// kwok on 127.0.0.1, creates four fake GPU nodes and one whose GPUs are
// handed out by Dynamic Resource Allocation, installs the CRDs and the
// manifests of artifacts/examples (and the DRA task of
// artifacts/examples/dra), and runs bin/gputask-controller. It also
// serves a scripted load index on 127.0.0.1 and applies an autoscaled
// GPUTaskSet that reads it (artifacts/examples/autoscaling/gputaskset-demo.yaml),
// so the view shows the set growing and shrinking with the load. The set's
// workers take kwok.SlowStartup to become Ready, and the demo plays them:
// some mark themselves busy for a while (workers.go), so the view shows
// starting, ready, busy and draining tasks next to the load. A second
// autoscaled set, artifacts/examples/autoscaling/gputaskset-vllm.yaml,
// scales vLLM workers to a wait SLO from vLLM's metrics: a fake vLLM pool
// (test/framework/fakevllm) serves them on 127.0.0.1 with as many workers
// as the set has Ready tasks, and a Prometheus scrapes it (vllm.go). Ctrl-C
// or SIGTERM stops every process, removes the temporary files and exits 0;
// a second Ctrl-C kills what still runs instead of waiting for it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// demoNode is one fake GPU node of the demo cluster.
type demoNode struct {
	name, model string
	gpus        int
}

var demoNodes = []demoNode{
	{"gpu-a100-1", "A100", 8},
	{"gpu-a100-2", "A100", 8},
	{"gpu-h100-1", "H100", 4},
	{"gpu-l40s-1", vllmGPU, 8},
}

// draNodes are the demo's DRA node pool: their GPUs are published as
// ResourceSlices, as a DRA driver does, not as nvidia.com/gpu. The model
// is the device attribute's, as NVIDIA's driver writes it; the node's
// model label only marks the pool.
var draNodes = []demoNode{
	{"gpu-dra-1", "NVIDIA A100-SXM4-80GB", 4},
}

// draNodeLabel is the GPU model label of the DRA nodes.
const draNodeLabel = "dra"

type options struct {
	kubeconfig string
	refresh    time.Duration
	runFor     time.Duration
	plain      bool
}

func main() {
	opts := options{}
	flag.StringVar(&opts.kubeconfig, "kubeconfig-out", filepath.Join(os.TempDir(), "gputask-demo.kubeconfig"),
		"Where to write the admin kubeconfig for kubectl in another terminal; removed on exit.")
	flag.DurationVar(&opts.refresh, "refresh", time.Second, "How often the live view is redrawn.")
	flag.DurationVar(&opts.runFor, "for", 0, "Stop by itself after this long; 0 runs until Ctrl-C.")
	flag.BoolVar(&opts.plain, "plain", false, "Print each view below the last instead of redrawing the screen.")
	flag.Parse()
	os.Exit(demo(opts))
}

// demo runs the demo until it is stopped, and returns the exit status: 0
// when the user stopped it, whatever stdout did meanwhile.
func demo(opts options) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := newStopper(cancel)
	// Output often goes through a pipe (make demo | tee log) whose reader
	// may die first; a write then fails with EPIPE, which the demo survives
	// to clean up, rather than killing it with SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	restore := takeTerminal()
	defer restore()

	if opts.runFor > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, opts.runFor)
		defer cancelTimeout()
	}
	if err := run(ctx, opts, stop); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, opts options, stop *stopper) (err error) {
	started := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("[%5.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	cp, err := framework.Start(ctx, framework.Options{
		Scheduler: true, ControllerManager: true, Kwok: true, Logf: logf,
	})
	if err != nil {
		if stoppedByUser(ctx, err) {
			// Start has stopped what it started; nothing failed, so there
			// are no logs to keep.
			if cp != nil {
				cp.Cleanup(false)
			}
			return nil
		}
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		logf("stopping every process")
		stop.stopping(cp.Processes())
		// The logs are the only clue when the demo failed; keep them then.
		if kept := cp.Cleanup(err != nil); kept != "" {
			logf("stopped; logs kept in %s", kept)
			return
		}
		logf("stopped; temporary files removed")
	}()
	defer os.Remove(opts.kubeconfig)

	load, err := startLoadServer(ctx, demoCurve)
	if err != nil {
		if stoppedByUser(ctx, err) {
			return nil
		}
		return err
	}
	defer load.Close()
	logf("load index served at %s (a %v curve: %s)", load.URL, demoCurve.period(), demoCurve.names())

	vllm, err := startVLLM(ctx, cp)
	if err != nil {
		if stoppedByUser(ctx, err) {
			return nil
		}
		return err
	}
	defer vllm.Close()
	logf("fake vLLM metrics served at %s (%v a request, %d slots a worker; a %v curve of requests/s: %s), scraped by Prometheus at %s",
		vllm.URL, vllmServiceTime, vllmSlots, vllmCurve.period(), vllmCurve.names(), vllm.prom.URL)

	if err := setUp(ctx, cp, opts, load.URL, vllm.prom.URL, logf); err != nil {
		if stoppedByUser(ctx, err) {
			return nil
		}
		return err
	}

	go newWorkers(cp, logf).run(ctx)
	go vllm.followWorkers(ctx, cp)

	v := newView(cp, opts, started, load, vllm)
	if err := v.loop(ctx); err != nil {
		// Nobody sees the view any more (`make demo | head`, say): stop.
		fmt.Fprintf(os.Stderr, "demo: writing the view: %v; stopping\n", err)
		return nil
	}
	if v.allRunningAfter > 0 {
		logf("all tasks were Running %.1fs after the demo started", v.allRunningAfter.Seconds())
	}
	return nil
}

// setUp makes the demo cluster: the kubeconfig for the user, the nodes, the
// controller, the examples, the autoscaled set reading loadURL, and the SLO
// set reading vLLM's metrics from the Prometheus at promURL.
func setUp(ctx context.Context, cp *framework.ControlPlane, opts options, loadURL, promURL string, logf func(string, ...any)) error {
	kubeconfig, err := os.ReadFile(cp.KubeconfigPath)
	if err != nil {
		return fmt.Errorf("reading kubeconfig: %w", err)
	}
	if err := os.WriteFile(opts.kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	logf("kubeconfig written: export KUBECONFIG=%s", opts.kubeconfig)

	for _, n := range demoNodes {
		if _, err := cp.CreateGPUNode(ctx, n.name, n.model, n.gpus); err != nil {
			return err
		}
		logf("node %s ready with %d %s GPUs", n.name, n.gpus, n.model)
	}
	for _, n := range draNodes {
		if _, err := cp.CreateDRANode(ctx, n.name, draNodeLabel, n.model, n.gpus); err != nil {
			return err
		}
		logf("node %s ready with %d %s GPUs published as a ResourceSlice (DRA)", n.name, n.gpus, n.model)
	}
	// The ServiceAccount controller would make the default ServiceAccount
	// soon; making it now saves the first pods a rejected create.
	if err := cp.CreateNamespace(ctx, "default"); err != nil {
		return err
	}
	controller, err := cp.StartController(ctx, "--workers=4")
	if err != nil {
		return err
	}
	logf("gputask-controller running (pid %d, log %s)", controller.Pid(), controller.LogPath)

	examples := filepath.Join(cp.Root, "artifacts", "examples")
	// The PriorityClass goes first: a pod naming a missing one is rejected,
	// and the task would wait for the controller's retry.
	// Then the DRA examples: the DeviceClass, and a task whose GPU comes
	// from a ResourceClaim.
	for _, path := range []string{filepath.Join(examples, "priorityclass.yaml"), examples,
		filepath.Join(examples, "dra", "deviceclass.yaml"), filepath.Join(examples, "dra", "gputask.yaml")} {
		out, err := cp.Kubectl(ctx, "apply", "-f", path)
		if err != nil {
			return err
		}
		fmt.Print(out)
	}
	if err := applyAutoscaledSet(ctx, cp, loadURL); err != nil {
		return err
	}
	return applyVLLMSet(ctx, cp, promURL)
}

// autoscaledSetFile is the example the demo applies with the load index's
// real address in place of its placeholder URL, so the file users read is
// the set the demo runs.
const (
	autoscaledSetFile  = "artifacts/examples/autoscaling/gputaskset-demo.yaml"
	autoscaledSetName  = "a100-elastic"
	placeholderLoadURL = "http://load-index.example.svc:8080/api/load"
)

// withSlowStart adds slowStartEnv to the set's template, so that its workers
// take a while to become Ready as GPU workers loading a model do. A field
// the API types do not know is an error, never silently dropped.
func withSlowStart(manifest []byte) ([]byte, error) {
	var set gputaskv1.GPUTaskSet
	if err := yaml.UnmarshalStrict(manifest, &set); err != nil {
		return nil, fmt.Errorf("decoding the set: %w", err)
	}
	set.Spec.Template.Spec.Env = append(set.Spec.Template.Spec.Env, slowStartEnv)
	out, err := yaml.Marshal(&set)
	if err != nil {
		return nil, fmt.Errorf("encoding the set: %w", err)
	}
	return out, nil
}

func applyAutoscaledSet(ctx context.Context, cp *framework.ControlPlane, loadURL string) error {
	manifest, err := os.ReadFile(filepath.Join(cp.Root, autoscaledSetFile))
	if err != nil {
		return fmt.Errorf("reading the autoscaled set: %w", err)
	}
	if !bytes.Contains(manifest, []byte(placeholderLoadURL)) {
		return fmt.Errorf("%s no longer names %s; update the demo to match", autoscaledSetFile, placeholderLoadURL)
	}
	manifest, err = withSlowStart(bytes.ReplaceAll(manifest, []byte(placeholderLoadURL), []byte(loadURL)))
	if err != nil {
		return fmt.Errorf("%s: %w", autoscaledSetFile, err)
	}
	out, err := cp.KubectlWithInput(ctx, manifest, "apply", "-f", "-")
	if err != nil {
		return err
	}
	fmt.Print(out)
	return nil
}
