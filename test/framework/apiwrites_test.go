package framework

import (
	"os"
	"testing"
)

const sampleMetrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 1000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="409",component="apiserver",dry_run="",group="gputask.io",resource="gputasksets",scope="resource",subresource="status",verb="PUT",version="v1"} 12
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 10
# HELP apiserver_current_inflight_requests [STABLE] Maximal number of currently used inflight request limit.
# TYPE apiserver_current_inflight_requests gauge
apiserver_current_inflight_requests{request_kind="mutating"} 1
`

func TestParseAPIWrites(t *testing.T) {
	got, err := parseAPIWrites(sampleMetrics)
	if err != nil {
		t.Fatal(err)
	}
	want := APIWrites{
		{Verb: "POST", Resource: "pods", Code: "201"}:                                                   1000,
		{Verb: "POST", Resource: "pods", Subresource: "binding", Code: "201"}:                           1000,
		{Verb: "PUT", Group: "gputask.io", Resource: "gputasksets", Subresource: "status", Code: "409"}: 12,
		{Verb: "POST", Group: "events.k8s.io", Resource: "events", Code: "201"}:                         1000,
		{Verb: "POST", Resource: "events", Code: "201"}:                                                 10,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d series, want %d:\n%s", len(got), len(want), got)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: got %d, want %d", k, got[k], n)
		}
	}
	workload := got.Filter(WorkloadWrite)
	if workload.Total() != 1022 {
		t.Errorf("workload writes: got %d, want 1022 (pods, gputasksets/status, core events):\n%s", workload.Total(), workload)
	}
	before := APIWrites{{Verb: "POST", Resource: "pods", Code: "201"}: 400}
	if d := got.Sub(before)[WriteKey{Verb: "POST", Resource: "pods", Code: "201"}]; d != 600 {
		t.Errorf("Sub: got %d pod creates, want 600", d)
	}
}

func TestParseAPIWritesWithoutTheMetric(t *testing.T) {
	if _, err := parseAPIWrites("# nothing here\n"); err == nil {
		t.Error("want an error when apiserver_request_total is missing")
	}
}

func TestOwnUsage(t *testing.T) {
	cpu, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rss, err := procPeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if cpu < 0 || rss <= 0 {
		t.Errorf("got CPU %s and peak RSS %d bytes, want both positive", cpu, rss)
	}
}
