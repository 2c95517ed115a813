// Package hpafidelity checks the replay's model of the HorizontalPodAutoscaler
// (pkg/replay, hpa.go) against kube-controller-manager's HPA controller on
// the local control plane.
package hpafidelity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/gputask/gputask-controller/pkg/replay/baseline"
	"github.com/gputask/gputask-controller/pkg/replay/sim"
	"github.com/gputask/gputask-controller/pkg/replay/workload"
	"github.com/gputask/gputask-controller/test/framework"
	"github.com/gputask/gputask-controller/test/framework/metricsadapter"
)

// The bridge the adapter listens on. The API server refuses loopback
// endpoints, so the aggregation layer reaches the adapter here; nothing
// else on the machine uses the name or the network (CreateBridge checks).
const (
	bridgeName   = "gputask-hpa0"
	bridgePrefix = "10.89.0.1/24"
)

// The HPAs of this test: one External metric, a Value target, between 1
// and 12 pods.
const (
	metricName = "gputask-load-index"
	poolLabel  = "gputask.io/pool"
	minPods    = 1
	maxPods    = 12
	// concurrency is the slots of one modelled worker.
	concurrency = 4
)

var target = resource.MustParse("700m")

// syncPeriod is --horizontal-pod-autoscaler-sync-period, and the model's
// SyncPeriod. Each window and policy period (15 s, 12 s, 60 s) ends a
// little before a multiple of it, so that no recommendation or scale event
// sits near a cutoff, where the real controller's timing would decide. The
// model's syncs fall exactly one period apart; the real ones a little more
// (the next starts a period after the last one wrote its status), so the
// real HPA's samples are a little older than the model's, never younger:
// each window leaves that drift 4 s or more.
const syncPeriod = 8 * time.Second

// downscaleStabilization is --horizontal-pod-autoscaler-downscale-stabilization
// (the window of an HPA without a behavior): 5 minutes compressed to 60 s,
// as the behavior's scale-down below.
const downscaleStabilization = 60 * time.Second

// compressedGPUServingBehavior is baseline.GPUServingBehavior with its
// scale-down five times faster: its 300 s window and its 2 pods per 60 s
// would keep the test running for ten minutes. Its scale-up is the
// preset's own. The model and the real HPA get the same object.
func compressedGPUServingBehavior() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	b := baseline.GPUServingBehavior()
	const compression = 5
	*b.ScaleDown.StabilizationWindowSeconds /= compression
	for i := range b.ScaleDown.Policies {
		b.ScaleDown.Policies[i].PeriodSeconds /= compression
	}
	return b
}

// stepTrace is a quiet start, a step that asks for more pods than maxPods
// from 10 s to 45 s, and a quiet end that lasts until every scale-down has
// happened, and a few syncs more: one request of 1 s every 3 s throughout,
// and 40 requests of 35 s at 10 s.
func stepTrace() workload.Trace {
	var reqs []workload.Served
	for at := time.Duration(0); at < 215*time.Second; at += 3 * time.Second {
		reqs = append(reqs, workload.Served{Arrival: at, Service: time.Second})
		if at == 9*time.Second {
			for range 40 {
				reqs = append(reqs, workload.Served{Arrival: 10 * time.Second, Service: 35 * time.Second})
			}
		}
	}
	return workload.Trace{Requests: reqs}
}

// TestHPAMatchesReplay: the replay's HPA makes the real HPA's decisions.
// kube-controller-manager's HPA controller scales a Deployment of kwok pods
// from an External metric that an adapter serves through the aggregation
// layer, while baseline.NewHPA with the same configuration is played over the
// step trace by sim.Play. At its k-th sync the real HPA reads what the
// model read at its k-th sync, through sim.LoadIndexServer. Both must
// make the same changes of the replica count: the same values, in the same
// order, each at the same sync (so within one sync period of the model's).
//
// Why the k-th sync reads the model's k-th value rather than a pool model
// played in real time beside the cluster: the real syncs fall a few
// milliseconds later each period than the model's, and a request that
// arrives or ends in between would change a value read live; the load is
// the replay's own, not under test. What is under test is everything the
// HPA adds: the tolerance, the Ready pods it multiplies by, the
// stabilization windows, the rate limits, the Deployment that carries out
// each count, and the time between syncs as the real controller keeps it.
//
// The cases run in parallel on one control plane: the hpa row's HPA, with
// the GPU serving behavior (baseline.GPUServingBehavior) whose scale-down is
// compressed five times in time (compressedGPUServingBehavior), and the
// hpa-default row's, without a behavior, with
// --horizontal-pod-autoscaler-downscale-stabilization compressed to 60 s.
func TestHPAMatchesReplay(t *testing.T) {
	bridge := framework.CreateBridgeT(t, bridgeName, netip.MustParsePrefix(bridgePrefix))
	controllers := append(append([]string(nil), framework.DefaultControllers...),
		"horizontal-pod-autoscaler-controller", "deployment-controller", "replicaset-controller")
	cp := framework.StartT(t, framework.Options{
		ControllerManager: true, Kwok: true, AggregationLayer: true, Controllers: controllers,
		ExtraArgs: map[string][]string{framework.BinControllerManager: {
			"--horizontal-pod-autoscaler-sync-period=" + syncPeriod.String(),
			"--horizontal-pod-autoscaler-downscale-stabilization=" + downscaleStabilization.String(),
		}},
	})
	cp.CreateGPUNodeT(t, nodeName, "A100", 8)
	scripts := &scripts{byNamespace: map[string]*script{}}
	adapter := startAdapter(t, cp, bridge, scripts)
	checkAdapterAuthenticates(t, cp, adapter, scripts)

	cases := []struct {
		name     string
		behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
	}{
		{name: baseline.PolicyHPA, behavior: compressedGPUServingBehavior()},
		{name: baseline.PolicyHPADefault},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := baseline.HPAConfig{
				Min: minPods, Max: maxPods, Initial: minPods,
				Target: target.AsApproximateFloat64(), Load: sim.LoadDemand,
				SyncPeriod: syncPeriod, DownscaleStabilization: downscaleStabilization,
				Behavior: tc.behavior.DeepCopy(),
			}
			model := playModel(cfg, stepTrace())
			want := model.decisions()
			t.Logf("model: %d syncs, decisions (replicas@sync) %v", len(model.syncs), want)
			ups, downs := directions(want, minPods)
			if ups < 2 || downs < 2 {
				t.Fatalf("the model made %v: the trace must drive at least two scale-ups and two scale-downs", want)
			}
			got, log := runReal(t, cp, scripts, tc.name, tc.behavior, model)
			t.Logf("real syncs:\n%s", log)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the real HPA made %v, the model %v (replicas@sync); want the same changes, in the same order, at the same syncs", got, want)
			}
		})
	}
}

// nodeName is the kwok node the Deployments' pods are bound to; no
// scheduler runs.
const nodeName = "hpa-node"

// modelSync is what the model read and decided at one sync.
type modelSync struct {
	value    float64
	replicas int32
}

// recordingHPA is the model's HPA, recording at each sync the load index
// that sim.LoadIndexServer publishes for the pool and the count it then
// asks for.
type recordingHPA struct {
	*baseline.HPA
	index *sim.LoadIndexServer
	syncs []modelSync
}

func (r *recordingHPA) Step(p *sim.Pool) {
	r.index.Update(p)
	value := r.index.Value()
	r.HPA.Step(p)
	r.syncs = append(r.syncs, modelSync{value: value, replicas: r.HPA.Replicas()})
}

// playModel plays the trace under the model of cfg, pods Ready as soon as
// they are created, as kwok's are.
func playModel(cfg baseline.HPAConfig, trace workload.Trace) *recordingHPA {
	rec := &recordingHPA{HPA: baseline.NewHPA(cfg), index: sim.NewLoadIndexServer(cfg.Load)}
	pool := sim.NewPool(trace, time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC), concurrency, 0)
	sim.Play(pool, rec, sim.PlayOptions{SampleEvery: time.Minute, Limit: time.Minute, Load: cfg.Load})
	return rec
}

// decision is a change of the replica count at one sync, counted from the
// HPA's first.
type decision struct {
	sync     int
	replicas int32
}

func (d decision) String() string { return fmt.Sprintf("%d@%d", d.replicas, d.sync) }

func (r *recordingHPA) decisions() []decision {
	var out []decision
	last := int32(minPods)
	for k, s := range r.syncs {
		if s.replicas != last {
			out = append(out, decision{sync: k, replicas: s.replicas})
			last = s.replicas
		}
	}
	return out
}

// directions counts the scale-ups and scale-downs of decisions from initial.
func directions(ds []decision, initial int32) (ups, downs int) {
	last := initial
	for _, d := range ds {
		if d.replicas > last {
			ups++
		} else {
			downs++
		}
		last = d.replicas
	}
	return ups, downs
}

// script serves one namespace's HPA the model's values, one per read,
// and logs the reads and the Deployment's changes of spec.replicas in the
// order they happen.
type script struct {
	mu      sync.Mutex
	values  []float64
	reads   int
	lastRep int32
	changes []decision
	log     strings.Builder
	started time.Time
}

func (s *script) read() resource.Quantity {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reads == 0 {
		s.started = time.Now()
	}
	v := s.values[min(s.reads, len(s.values)-1)]
	fmt.Fprintf(&s.log, "sync %2d at %6.2fs: reads %.3f, replicas %d\n", s.reads, time.Since(s.started).Seconds(), v, s.lastRep)
	s.reads++
	return *resource.NewMilliQuantity(int64(v*1000+0.5), resource.DecimalSI)
}

// replicasChanged records a new spec.replicas as decided at the last sync
// that read the metric.
func (s *script) replicasChanged(replicas int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.log, "          replicas -> %d\n", replicas)
	s.lastRep = replicas
	s.changes = append(s.changes, decision{sync: s.reads - 1, replicas: replicas})
}

func (s *script) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// scripts routes the adapter's reads to the script of the HPA's namespace.
type scripts struct {
	mu          sync.Mutex
	byNamespace map[string]*script
}

func (s *scripts) add(ns string, sc *script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byNamespace[ns] = sc
}

func (s *scripts) source(_ context.Context, namespace string, _ labels.Selector) (resource.Quantity, error) {
	s.mu.Lock()
	sc := s.byNamespace[namespace]
	s.mu.Unlock()
	if sc == nil {
		return resource.Quantity{}, fmt.Errorf("no script for namespace %s", namespace)
	}
	return sc.read(), nil
}

// startAdapter runs the adapter on the bridge as a ServiceAccount with the
// rights a deployed adapter gets, and registers it for
// external.metrics.k8s.io.
func startAdapter(t *testing.T, cp *framework.ControlPlane, bridge *framework.Bridge, sc *scripts) *metricsadapter.Adapter {
	t.Helper()
	ctx := context.Background()
	const ns, name = "metrics-adapter", "metrics-adapter"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	user, groups := framework.ServiceAccountUser(ns, name)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}
	if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + ":system:auth-delegator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kube.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + ":auth-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cp.KubeconfigAs(name, user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := cp.IssueServingCert(name, framework.ServiceDNSNames(ns, name), []net.IP{net.IP(bridge.Addr().AsSlice())})
	if err != nil {
		t.Fatal(err)
	}
	adapter, err := metricsadapter.Start(ctx, metricsadapter.Options{
		Address:    netip.AddrPortFrom(bridge.Addr(), 0),
		CertFile:   cert,
		KeyFile:    key,
		Kubeconfig: kubeconfig,
		Metrics:    map[string]metricsadapter.Source{metricName: sc.source},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adapter.Stop)
	if err := cp.RegisterAPIService(ctx, ns, name, metricsadapter.Group, metricsadapter.Version, adapter.Addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.UnregisterAPIService(context.Background(), metricsadapter.Group, metricsadapter.Version); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return adapter
}

// checkAdapterAuthenticates: a read through the API server is served; the
// same read sent to the adapter directly, claiming system:masters in the
// requestheader headers but without the API server's front-proxy
// certificate, is refused and never reaches the metric.
func checkAdapterAuthenticates(t *testing.T, cp *framework.ControlPlane, adapter *metricsadapter.Adapter, sc *scripts) {
	t.Helper()
	const ns = "probe"
	probe := &script{values: []float64{0.25}}
	sc.add(ns, probe)
	path := "/apis/" + metricsadapter.Group + "/" + metricsadapter.Version + "/namespaces/" + ns + "/" + metricName
	body, err := cp.Kube.Discovery().RESTClient().Get().AbsPath(path).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading %s through the API server: %v", path, err)
	}
	if !strings.Contains(string(body), `"value":"250m"`) || probe.readCount() != 1 {
		t.Fatalf("through the API server: %s after %d reads, want 250m after 1", body, probe.readCount())
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CACertPEM())
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequest(http.MethodGet, "https://"+adapter.Addr.String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(framework.RequestHeaderUser, "admin")
	req.Header.Set(framework.RequestHeaderGroup, "system:masters")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("reading the adapter directly: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Errorf("a direct read claiming system:masters without the front-proxy certificate: %s, want 401 or 403", resp.Status)
	}
	if n := probe.readCount(); n != 1 {
		t.Errorf("the metric was read %d times, want 1: the direct read reached it", n)
	}
}

// runReal runs the real HPA over the model's values, in a namespace of
// its own, until it has made one sync more than the model, and returns the
// changes of the Deployment's spec.replicas by sync, and the log of syncs.
func runReal(t *testing.T, cp *framework.ControlPlane, sc *scripts, name string, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, model *recordingHPA) ([]decision, string) {
	t.Helper()
	ctx := context.Background()
	ns := cp.NamespaceT(t)
	s := &script{lastRep: minPods}
	for _, m := range model.syncs {
		s.values = append(s.values, m.value)
	}
	sc.add(ns, s)

	// The Deployment's changes of spec.replicas, in order.
	factory := informers.NewSharedInformerFactoryWithOptions(cp.Kube, 0, informers.WithNamespace(ns))
	_, err := factory.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*appsv1.Deployment), newObj.(*appsv1.Deployment)
			if ptr.Deref(o.Spec.Replicas, 0) != ptr.Deref(n.Spec.Replicas, 0) {
				s.replicasChanged(ptr.Deref(n.Spec.Replicas, 0))
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	deployments := cp.Kube.AppsV1().Deployments(ns)
	if _, err := deployments.Create(ctx, deployment(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, 2*time.Minute, "the first pod Ready", func(ctx context.Context) (bool, string) {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == minPods, fmt.Sprintf("%d Ready", d.Status.ReadyReplicas)
	})
	if _, err := cp.Kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa(name, behavior), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := len(model.syncs)
	framework.Poll(t, time.Duration(n+1)*syncPeriod+2*time.Minute, fmt.Sprintf("%d syncs of the real HPA", n+1), func(context.Context) (bool, string) {
		reads := s.readCount()
		return reads > n, fmt.Sprintf("%d syncs", reads)
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	var got []decision
	for _, c := range s.changes {
		if c.sync < n {
			got = append(got, c)
		}
	}
	return got, s.log.String()
}

// deployment is minPods pods bound to the kwok node, which kwok makes
// Running and Ready at once.
func deployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](minPods),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeName:   nodeName,
					Containers: []corev1.Container{{Name: "worker", Image: "gputask.io/fake-worker"}},
				},
			},
		},
	}
}

// hpa is the HPA of the model's configuration: the External metric of
// this pool, a Value target, min and max, and behavior.
func hpa(name string, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To[int32](minPods),
			MaxReplicas:    maxPods,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{
						Name:     metricName,
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{poolLabel: name}},
					},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &target},
				},
			}},
			Behavior: behavior,
		},
	}
}
