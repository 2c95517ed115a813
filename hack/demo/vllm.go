package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
	"github.com/gputask/gputask-controller/test/framework/fakevllm"
)

// The demo's second autoscaled pool: vLLM workers scaled to a wait SLO from
// vLLM's own metrics. A fake vLLM pool (test/framework/fakevllm) serves
// them on 127.0.0.1 with as many workers as the set has Ready tasks, a
// Prometheus scrapes it, and the set of vllmSetFile reads its
// documented queries from that Prometheus.
const (
	vllmSetFile = "artifacts/examples/autoscaling/gputaskset-vllm.yaml"
	vllmSetName = "vllm-slo"
	// placeholderPrometheus is the serverAddress the file names, replaced
	// by the demo's Prometheus.
	placeholderPrometheus = "http://prometheus.monitoring:9090"
	// vllmModelName is the model_name the file's queries select.
	vllmModelName = "llama"
	// vllmGPU is the GPU model of the node the pool runs on, a node of its
	// own, so that the load-index set's story on the A100s stays the same.
	vllmGPU = "L40S"
	// vllmServiceTime and vllmSlots make one worker serve 2 requests/s.
	vllmServiceTime = 4 * time.Second
	vllmSlots       = 8
)

// vllmCurve is the requests per second the fake pool is offered: quiet,
// a rush to three workers' worth, a busy plateau, and calm again, in
// about four minutes.
var vllmCurve = curve{
	{"quiet", 40 * time.Second, 1, 1},
	{"rush", 30 * time.Second, 1, 6},
	{"busy", 60 * time.Second, 6, 6},
	{"calm", 90 * time.Second, 1.5, 1.5},
}

// vllmDemo is the fake vLLM endpoint and the Prometheus that scrapes it.
type vllmDemo struct {
	pool    *fakevllm.Pool
	srv     *http.Server
	prom    *framework.Prometheus
	started time.Time
	// URL is the fake endpoint's /metrics.
	URL string
	// workers is the set's Ready tasks, which the pool serves with.
	workers atomic.Int32
}

// startVLLM serves the fake vLLM pool on a free loopback port and starts a
// Prometheus scraping it; both stop with the demo.
func startVLLM(ctx context.Context, cp *framework.ControlPlane) (*vllmDemo, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the fake vLLM endpoint: %w", err)
	}
	d := &vllmDemo{started: time.Now(), URL: "http://" + ln.Addr().String() + "/metrics"}
	d.pool = fakevllm.New(fakevllm.Config{
		ModelName: vllmModelName, Rate: func(elapsed time.Duration) float64 { r, _ := vllmCurve.at(elapsed); return r },
		ServiceTime: vllmServiceTime, SlotsPerWorker: vllmSlots,
		Workers: func() int { return int(d.workers.Load()) }, Seed: uint64(d.started.UnixNano()),
	}.WithH100Tokens())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.pool)
	d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Printf("fake vLLM endpoint stopped: %v\n", err)
		}
	}()
	d.prom, err = cp.StartPrometheus(ctx, ln.Addr().String())
	if err != nil {
		d.srv.Close()
		return nil, err
	}
	return d, nil
}

// Close stops the endpoint; the Prometheus stops with the control plane.
func (d *vllmDemo) Close() error { return d.srv.Close() }

// followWorkers keeps the pool's workers at the set's Ready tasks, as a
// router sends requests only to the workers that passed their readiness
// probe, until ctx ends.
func (d *vllmDemo) followWorkers(ctx context.Context, cp *framework.ControlPlane) {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		list, err := cp.GPUTask.GputaskV1().GPUTasks(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: gputaskv1.LabelTaskSet + "=" + vllmSetName})
		if err == nil {
			ready := 0
			for _, t := range list.Items {
				if t.DeletionTimestamp == nil && meta.IsStatusConditionTrue(t.Status.Conditions, gputaskv1.ConditionReady) {
					ready++
				}
			}
			d.workers.Store(int32(ready))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// vllmDemoSet is the example set as the demo runs it: the metrics exactly
// as the file has them but for the Prometheus address, and times short
// enough to watch (the file's are for real workers that load a model for
// minutes). Its workers start slowly, and run on the pool's own node.
func vllmDemoSet(manifest []byte, promURL string) ([]byte, error) {
	if !bytes.Contains(manifest, []byte(placeholderPrometheus)) {
		return nil, fmt.Errorf("%s no longer names %s; update the demo to match", vllmSetFile, placeholderPrometheus)
	}
	manifest = bytes.ReplaceAll(manifest, []byte(placeholderPrometheus), []byte(promURL))
	var set gputaskv1.GPUTaskSet
	if err := yaml.UnmarshalStrict(manifest, &set); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", vllmSetFile, err)
	}
	if set.Name != vllmSetName || set.Spec.Autoscaling == nil {
		return nil, fmt.Errorf("%s is no longer the autoscaled set %s; update the demo to match", vllmSetFile, vllmSetName)
	}
	short := func(d time.Duration) *gputaskv1.Duration { return &gputaskv1.Duration{Duration: d} }
	set.Spec.Template.Spec.GPU = vllmGPU
	set.Spec.Template.Spec.Env = append(set.Spec.Template.Spec.Env, slowStartEnv)
	set.Spec.MinTaskAge = short(20 * time.Second)
	if set.Spec.ScaleIn != nil {
		set.Spec.ScaleIn.DrainTimeout = short(30 * time.Second)
	}
	a := set.Spec.Autoscaling
	a.Interval, a.StartupTimeout, a.ScaleDownStabilizationWindow = short(5*time.Second), short(time.Minute), short(30*time.Second)
	return yaml.Marshal(&set)
}

func applyVLLMSet(ctx context.Context, cp *framework.ControlPlane, promURL string) error {
	manifest, err := os.ReadFile(filepath.Join(cp.Root, vllmSetFile))
	if err != nil {
		return fmt.Errorf("reading the vLLM set: %w", err)
	}
	manifest, err = vllmDemoSet(manifest, promURL)
	if err != nil {
		return err
	}
	out, err := cp.KubectlWithInput(ctx, manifest, "apply", "-f", "-")
	if err != nil {
		return err
	}
	fmt.Print(out)
	return nil
}

// renderVLLM shows the SLO pool: the load offered, what the fake vLLM
// pool reports, and what the autoscaler made of it.
func (v *view) renderVLLM(ctx context.Context, w io.Writer) error {
	set, err := v.cp.GPUTask.GputaskV1().GPUTaskSets(metav1.NamespaceDefault).Get(ctx, vllmSetName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	rate, segment := vllmCurve.at(time.Since(v.vllm.started))
	s := v.vllm.pool.Snapshot()
	fmt.Fprintf(w, "offered %.2f requests/s (%s, a %v curve: %s); %d workers of %d slots, %v a request\n",
		rate, segment, vllmCurve.period(), vllmCurve.names(), v.vllm.workers.Load(), vllmSlots, vllmServiceTime)
	fmt.Fprintf(w, "vLLM reports: running %d  waiting %d  finished %d  mean queue time %s\n",
		s.Running, s.Waiting, s.Succeeded, meanQueueTime(s))
	fmt.Fprintf(w, "set: desired %d  ready %d  predicted p95 wait %s (SLO 10s)\n",
		ptrOr(set.Spec.Replicas, 1), set.Status.ReadyReplicas, orDash(predictedWaitOf(set)))
	for _, m := range set.Status.Metrics {
		value := m.Value
		if m.Error != "" {
			value = "error: " + m.Error
		}
		fmt.Fprintf(w, "  %s\t%s\n", m.Name, truncate(value, 80))
	}
	if d := set.Status.LastDecision; d != nil {
		fmt.Fprintf(w, "last decision: %d->%d %s: %s\n", d.From, d.To, d.Reason, truncate(d.Message, 110))
		fmt.Fprintf(w, "inputs: %s\n", truncate(d.Inputs, 150))
	}
	fmt.Fprintf(w, "%s\n", conditionSummary(set.Status.Conditions))
	return nil
}

func meanQueueTime(s fakevllm.Snapshot) string {
	if s.Succeeded == 0 {
		return "-"
	}
	return (time.Duration(s.QueueTimeSum / float64(s.Succeeded) * float64(time.Second))).Round(10 * time.Millisecond).String()
}

func predictedWaitOf(set *gputaskv1.GPUTaskSet) string {
	if set.Status.LastDecision == nil {
		return ""
	}
	return set.Status.LastDecision.PredictedWait
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
