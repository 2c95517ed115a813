package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gputask/gputask-controller/test/framework"
)

// alertRule is one alerting rule of artifacts/monitoring/gputask-rules.yaml.
type alertRule struct {
	Alert string `json:"alert"`
	Expr  string `json:"expr"`
}

// TestAlertMetrics runs the controller with leader election on a control
// plane of its own, with a task and two autoscaled sets: "capped", whose load
// index asks for more than its maxReplicas of 1, and "broken", whose load
// endpoint answers 500. Then:
//   - every metric an alert rule selects is in the controller's /metrics, so
//     no rule watches a series that does not exist (a misspelt or renamed
//     metric would make its alert silently never fire);
//   - a Prometheus that scrapes the controller evaluates each rule's
//     expression (without its `for`): GPUTaskSetAtMaxReplicas selects the
//     capped set, GPUTaskSetLoadIndexFailing the broken set's metric, and no
//     other alert selects anything in this healthy cluster.
//
// The metric names are read with Prometheus's own parser (its
// /api/v1/parse_query), so functions, label names and keywords are never
// mistaken for metrics.
func TestAlertMetrics(t *testing.T) {
	t.Parallel()
	c := startCluster(t, gpuNode{"a100-1", "A100", 8})
	ctx := context.Background()
	leaseNS := c.NamespaceT(t)
	ns := c.NamespaceT(t)
	rules := readAlertRules(t, filepath.Join(c.Root, "artifacts", "monitoring", "gputask-rules.yaml"))

	controller := c.StartControllerT(t, "--workers=2", "--metrics-bind-address=127.0.0.1:0", "--metrics-secure=false",
		"--leader-elect", "--leader-elect-resource-namespace="+leaseNS)
	metricsAddr := framework.ServingAddrT(t, controller, "metrics")

	high := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"data":{"load_balance":0.9}}`)
	}))
	t.Cleanup(high.Close)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "backend down", http.StatusInternalServerError)
	}))
	t.Cleanup(down.Close)

	createTask(t, c, ns, newTask("probe", "A100", 1))
	waitTask(t, c, ns, "probe", "Running", taskRunning)
	for name, endpoint := range map[string]string{"capped": high.URL, "broken": down.URL} {
		set := httpSet(name, "A100", endpoint, 1, time.Second)
		if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	capped := map[string]string{"namespace": ns, "taskset": "capped"}
	broken := map[string]string{"namespace": ns, "taskset": "broken", "metric": "load"}
	waitMetrics(t, metricsAddr, []metricWant{
		{"leader_election_master_status", map[string]string{"name": "gputask-controller"}, equals(1)},
		{"gputask_taskset_current_replicas", capped, equals(1)},
		{"gputask_taskset_scaling_decisions_total", map[string]string{"namespace": ns, "taskset": "capped", "reason": "TooManyReplicas"}, atLeast(1)},
		{"gputask_taskset_load_index_errors_total", broken, atLeast(1)},
		{"gputask_reconcile_total", map[string]string{"controller": "gputaskset-controller", "result": "success"}, atLeast(1)},
	})

	prom := c.StartPrometheusT(t, metricsAddr)

	status, body := framework.HTTPGet(ctx, "http://"+metricsAddr+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("/metrics: status %d", status)
	}
	exposed := exposedMetricNames(body)
	for _, rule := range rules {
		names := selectedMetrics(t, prom.URL, rule.Expr)
		t.Logf("%s selects %s", rule.Alert, strings.Join(names, ", "))
		if len(names) == 0 {
			t.Errorf("%s selects no metric: %s", rule.Alert, rule.Expr)
		}
		for _, name := range names {
			if !exposed[name] {
				t.Errorf("%s selects %s, which the controller's /metrics does not have", rule.Alert, name)
			}
		}
	}

	want := map[string][]map[string]string{
		"GPUTaskSetAtMaxReplicas":    {capped},
		"GPUTaskSetLoadIndexFailing": {broken},
	}
	for alert := range want {
		if !slices.ContainsFunc(rules, func(r alertRule) bool { return r.Alert == alert }) {
			t.Fatalf("artifacts/monitoring has no alert %s", alert)
		}
	}
	framework.Poll(t, 2*time.Minute, "each alert expression to select what this cluster shows", func(ctx context.Context) (bool, string) {
		var wrong []string
		for _, rule := range rules {
			samples, err := prom.Query(ctx, rule.Expr)
			if err != nil {
				wrong = append(wrong, fmt.Sprintf("%s: %v", rule.Alert, err))
				continue
			}
			got := make([]map[string]string, 0, len(samples))
			for _, s := range samples {
				got = append(got, s.Labels)
			}
			if !sameLabelSets(got, want[rule.Alert]) {
				wrong = append(wrong, fmt.Sprintf("%s selects %v, want %v", rule.Alert, got, want[rule.Alert]))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
}

func readAlertRules(t *testing.T, path string) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				rules = append(rules, r)
			}
		}
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no alerting rules", path)
	}
	return rules
}

// selectedMetrics parses expr with Prometheus's parser and returns the
// metric names of its vector and range selectors, sorted.
func selectedMetrics(t *testing.T, promURL, expr string) []string {
	t.Helper()
	status, body := framework.HTTPGet(context.Background(),
		promURL+"/api/v1/parse_query?"+url.Values{"query": {expr}}.Encode())
	if status != http.StatusOK {
		t.Fatalf("parsing %q: status %d: %s", expr, status, body)
	}
	var resp struct {
		Data any `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("parsing %q: %v", expr, err)
	}
	names := map[string]bool{}
	var walk func(any)
	walk = func(node any) {
		switch n := node.(type) {
		case map[string]any:
			if typ, _ := n["type"].(string); typ == "vectorSelector" || typ == "matrixSelector" {
				if name, _ := n["name"].(string); name != "" {
					names[name] = true
				}
			}
			for _, v := range n {
				walk(v)
			}
		case []any:
			for _, v := range n {
				walk(v)
			}
		}
	}
	walk(resp.Data)
	out := make([]string, 0, len(names))
	for name := range names {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// exposedMetricNames returns the names of the samples in a /metrics body in
// the Prometheus text format; a histogram gives its _bucket, _sum and _count.
func exposedMetricNames(body string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// sameLabelSets reports whether got holds exactly the label sets of want,
// each compared on want's labels only (Prometheus adds job and instance).
func sameLabelSets(got, want []map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	used := make([]bool, len(got))
	for _, w := range want {
		found := false
		for i, g := range got {
			if used[i] {
				continue
			}
			match := true
			for k, v := range w {
				match = match && g[k] == v
			}
			if match {
				used[i], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
