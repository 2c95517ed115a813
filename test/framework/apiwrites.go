package framework

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/component-base/metrics/testutil"
)

// apiRequestsMetric is the API server's counter of the requests it served, by
// verb, group, resource, subresource and code.
const apiRequestsMetric = "apiserver_request_total"

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = map[string]bool{
	"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true,
}

// WriteKey is one series of apiserver_request_total among the writes.
type WriteKey struct {
	Verb, Group, Resource, Subresource, Code string
}

// String reads "POST pods 201" or "PUT gputasks/status 409".
func (k WriteKey) String() string {
	res := k.Resource
	if k.Group != "" && k.Group != "gputask.io" {
		res += "." + k.Group
	}
	if k.Subresource != "" {
		res += "/" + k.Subresource
	}
	return k.Verb + " " + res + " " + k.Code
}

// APIWrites counts the write requests the API server has served, by series.
// Two scrapes give the writes in between with Sub.
type APIWrites map[WriteKey]int

// ScrapeAPIWrites reads the API server's /metrics as admin and returns its
// write counters.
func (cp *ControlPlane) ScrapeAPIWrites(ctx context.Context) (APIWrites, error) {
	body, err := cp.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping the apiserver's /metrics: %w", err)
	}
	return parseAPIWrites(string(body))
}

func parseAPIWrites(text string) (APIWrites, error) {
	metrics := testutil.NewMetrics()
	if err := testutil.ParseMetrics(text, &metrics); err != nil {
		return nil, fmt.Errorf("parsing the apiserver's /metrics: %w", err)
	}
	samples, ok := metrics[apiRequestsMetric]
	if !ok {
		return nil, fmt.Errorf("the apiserver's /metrics has no %s", apiRequestsMetric)
	}
	writes := APIWrites{}
	for _, s := range samples {
		verb := string(s.Metric["verb"])
		if !writeVerbs[verb] || s.Metric["dry_run"] != "" {
			continue
		}
		key := WriteKey{
			Verb:        verb,
			Group:       string(s.Metric["group"]),
			Resource:    string(s.Metric["resource"]),
			Subresource: string(s.Metric["subresource"]),
			Code:        string(s.Metric["code"]),
		}
		writes[key] += int(s.Value)
	}
	return writes, nil
}

// Sub returns the writes served since before, dropping series that did not move.
func (w APIWrites) Sub(before APIWrites) APIWrites {
	delta := APIWrites{}
	for k, n := range w {
		if d := n - before[k]; d != 0 {
			delta[k] = d
		}
	}
	return delta
}

// Discount takes n writes off series k, such as a test's own create, and
// drops the series when nothing is left.
func (w APIWrites) Discount(k WriteKey, n int) {
	if w[k] -= n; w[k] <= 0 {
		delete(w, k)
	}
}

// Total is the sum over every series.
func (w APIWrites) Total() int {
	total := 0
	for _, n := range w {
		total += n
	}
	return total
}

// Filter returns the series keep accepts.
func (w APIWrites) Filter(keep func(WriteKey) bool) APIWrites {
	out := APIWrites{}
	for k, n := range w {
		if keep(k) {
			out[k] = n
		}
	}
	return out
}

// Keys returns the series sorted by resource, subresource, verb and code, for
// a stable table.
func (w APIWrites) Keys() []WriteKey {
	keys := make([]WriteKey, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		if a.Subresource != b.Subresource {
			return a.Subresource < b.Subresource
		}
		if a.Verb != b.Verb {
			return a.Verb < b.Verb
		}
		return a.Code < b.Code
	})
	return keys
}

// String lists the series one a line, for a test's failure message.
func (w APIWrites) String() string {
	var b strings.Builder
	for _, k := range w.Keys() {
		fmt.Fprintf(&b, "%6d %s\n", w[k], k)
	}
	return b.String()
}

// WorkloadWrite reports whether a write is one a workload controller makes:
// the gputask.io objects, ReplicaSets, pods themselves and core/v1 events.
// The other writes on this control plane belong to kube-scheduler (bindings,
// events.k8s.io events), kwok (pod and node status, node leases) and
// kube-controller-manager's housekeeping controllers, and happen whichever
// controller runs the workload.
func WorkloadWrite(k WriteKey) bool {
	switch {
	case k.Group == "gputask.io":
		return true
	case k.Group == "apps" && k.Resource == "replicasets":
		return true
	case k.Group == "" && k.Resource == "pods":
		return k.Subresource == "" || k.Subresource == "eviction"
	case k.Group == "" && k.Resource == "events":
		return true
	}
	return false
}

// WaitWritesQuiet scrapes every interval until the writes keep accepts have
// not moved between two scrapes, and returns that last scrape. A controller
// that has converged may still be finishing a status write; this lets the
// caller count that write with the run rather than with the steady state
// after it.
func (cp *ControlPlane) WaitWritesQuiet(ctx context.Context, keep func(WriteKey) bool, interval time.Duration) (APIWrites, error) {
	last, err := cp.ScrapeAPIWrites(ctx)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the API writes to stop: %w", ctx.Err())
		case <-time.After(interval):
		}
		next, err := cp.ScrapeAPIWrites(ctx)
		if err != nil {
			return nil, err
		}
		if next.Sub(last).Filter(keep).Total() == 0 {
			return next, nil
		}
		last = next
	}
}
