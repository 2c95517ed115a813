package e2e

// The autoscaled pool of the autoscaling tests: its namespace, nodes, load
// index and recorder (setupPool), the GPUTaskSet itself (createPool), and
// what its status and events say.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/kwok"
)

const (
	// poolName is the GPUTaskSet of every autoscaling test; namespaces keep
	// them apart.
	poolName = "pool"
	// poolInterval is the default spec.autoscaling.interval of a pool:
	// short, so a test sees many decisions in a few seconds.
	poolInterval = time.Second
	// Loads against the default thresholds (up 0.8, down 0.5).
	loadHigh = 0.9
	loadMid  = 0.6
	loadLow  = 0.3
)

// setupPool gives an autoscaling test its own namespace, n fake nodes with
// gpus GPUs each of its own GPU model, a load index answering load, and a
// recorder of the pool, which the test then creates.
func setupPool(t *testing.T, n, gpus int, load float64) (ns, model string, index *loadServer, rec *poolRecorder) {
	t.Helper()
	ns = cp.NamespaceT(t)
	model = createGPUNodes(t, ns, n, gpus)
	index = newLoadServer(t, load)
	return ns, model, index, recordPool(t, ns)
}

// poolSpec is the GPUTaskSet named poolName that an autoscaling test creates.
type poolSpec struct {
	replicas, min, max int32
	model              string
	// gpus is each task's GPU amount; 0 asks for 1.
	gpus int32
	// interval is spec.autoscaling.interval; 0 keeps poolInterval.
	interval time.Duration
	// url is the HTTP load index the pool reads, unless prometheus is set.
	url string
	// timeout is the HTTP read timeout; 0 keeps the default.
	timeout    time.Duration
	prometheus *gputaskv1.PrometheusSource
	// metricName names the metric in status and events; "" is backend-load.
	metricName string
	// proportional picks the Proportional policy, aiming at target per task
	// ("" is 0.5); otherwise the Step policy at its defaults (thresholds 0.8
	// and 0.5, stepUp 3, stepDown 1), with stepUp if set.
	proportional  bool
	target        string
	stepUp        int32
	minTaskAge    time.Duration
	capacityAware bool
	// slow makes the pods take kwok.SlowStartup to become Ready.
	slow          bool
	drainTimeout  *time.Duration
	noAutoscaling bool
}

// createPool creates the pool with no scale-down stabilization, so every
// decision shows at once.
func createPool(t *testing.T, ns string, p poolSpec) {
	t.Helper()
	amount := intstr.FromInt32(max(p.gpus, 1))
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: &p.replicas,
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: p.model, GPUAmount: &amount}},
		},
	}
	if p.slow {
		set.Spec.Template.Spec.Env = []corev1.EnvVar{{Name: kwok.FakeStartupEnv, Value: kwok.FakeStartupSlow}}
	}
	if p.drainTimeout != nil {
		set.Spec.ScaleIn = &gputaskv1.ScaleInSpec{DrainTimeout: &gputaskv1.Duration{Duration: *p.drainTimeout}}
	}
	if p.minTaskAge > 0 {
		set.Spec.MinTaskAge = &gputaskv1.Duration{Duration: p.minTaskAge}
	}
	if !p.noAutoscaling {
		metric := gputaskv1.MetricSpec{Name: "backend-load", Prometheus: p.prometheus}
		if p.metricName != "" {
			metric.Name = p.metricName
		}
		if p.prometheus == nil {
			metric.HTTP = &gputaskv1.HTTPSource{URL: p.url}
			if p.timeout > 0 {
				metric.HTTP.Timeout = &gputaskv1.Duration{Duration: p.timeout}
			}
		}
		policy := gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy}
		if p.stepUp > 0 {
			policy.StepUp = &p.stepUp
		}
		if p.proportional {
			policy.Type = gputaskv1.ProportionalPolicy
			target := resource.MustParse(cmp.Or(p.target, "0.5"))
			metric.Target = &target
		}
		interval := p.interval
		if interval == 0 {
			interval = poolInterval
		}
		set.Spec.Autoscaling = &gputaskv1.AutoscalingSpec{
			MinReplicas: &p.min, MaxReplicas: p.max,
			Interval:                     &gputaskv1.Duration{Duration: interval},
			Metrics:                      []gputaskv1.MetricSpec{metric},
			Policy:                       policy,
			ScaleDownStabilizationWindow: &gputaskv1.Duration{},
			CapacityAware:                p.capacityAware,
		}
	}
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating gputaskset %s/%s: %v", ns, poolName, err)
	}
}

// httpSet is a set of one task of one GPU of model, autoscaled between 1
// and maxReplicas tasks by the Step policy at its defaults from the load
// index at url (metric "load"), read every interval. At the loads the tests
// serve between the thresholds it holds.
func httpSet(name, model, url string, maxReplicas int32, interval time.Duration) *gputaskv1.GPUTaskSet {
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](1),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: newTask("", model, 1).Spec},
			Autoscaling: &gputaskv1.AutoscalingSpec{
				MinReplicas: ptr.To[int32](1),
				MaxReplicas: maxReplicas,
				Interval:    &gputaskv1.Duration{Duration: interval},
				Policy:      gputaskv1.ScalingPolicy{Type: gputaskv1.StepPolicy},
				Metrics:     []gputaskv1.MetricSpec{{Name: "load", HTTP: &gputaskv1.HTTPSource{URL: url}}},
			},
		},
	}
}

// patchPool merge-patches the pool.
func patchPool(t *testing.T, ns, patch string) {
	t.Helper()
	if _, err := cp.GPUTask.GputaskV1().GPUTaskSets(ns).Patch(context.Background(), poolName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching the pool with %s: %v", patch, err)
	}
}

// waitEvents waits until the pool has events of the reason and type whose
// messages contain each of wants; if they do not come, it marks the test
// failed and lets it go on.
func waitEvents(t *testing.T, ns, reason, eventType string, wants ...string) {
	t.Helper()
	selector := fields.Set{
		"involvedObject.kind": "GPUTaskSet",
		"involvedObject.name": poolName,
		"reason":              reason,
		"type":                eventType,
	}.AsSelector().String()
	var messages []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, nil
		}
		messages = messages[:0]
		for _, e := range list.Items {
			messages = append(messages, e.Message)
		}
		for _, want := range wants {
			if !slices.ContainsFunc(messages, func(m string) bool { return strings.Contains(m, want) }) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("want %s events %s with %q; got %q: %v", eventType, reason, wants, messages, err)
	}
}

func decisionReason(set *gputaskv1.GPUTaskSet) string {
	if set.Status.LastDecision == nil {
		return ""
	}
	return set.Status.LastDecision.Reason
}

func conditionIs(set *gputaskv1.GPUTaskSet, condType string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(set.Status.Conditions, condType)
	return c != nil && c.Status == status && c.Reason == reason
}

func describeStatus(set *gputaskv1.GPUTaskSet) string {
	if set == nil {
		return "no set"
	}
	s := set.Status
	out := fmt.Sprintf("spec.replicas=%d replicas=%d running=%d pending=%d heldBack=%d load=%q failures=%d",
		ptr.Deref(set.Spec.Replicas, 1), s.Replicas, s.RunningReplicas, s.PendingReplicas, s.HeldBackReplicas, s.LoadIndex, s.ConsecutiveFailures)
	if s.CapacityReplicas != nil {
		out += fmt.Sprintf(" capacity=%d", *s.CapacityReplicas)
	}
	if d := s.LastDecision; d != nil {
		out += fmt.Sprintf("\n  decision %d->%d %s: %s", d.From, d.To, d.Reason, d.Message)
	}
	for _, c := range s.Conditions {
		out += fmt.Sprintf("\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return out
}
