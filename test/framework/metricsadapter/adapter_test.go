package metricsadapter

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

func TestGetExternalMetric(t *testing.T) {
	type read struct {
		namespace, selector string
	}
	var reads []read
	p := &externalMetrics{metrics: map[string]Source{
		"load-index": func(_ context.Context, namespace string, selector labels.Selector) (resource.Quantity, error) {
			reads = append(reads, read{namespace, selector.String()})
			return *resource.NewMilliQuantity(1234, resource.DecimalSI), nil
		},
		"broken": func(context.Context, string, labels.Selector) (resource.Quantity, error) {
			return resource.Quantity{}, errors.New("backend down")
		},
	}}
	ctx := context.Background()
	selector, err := labels.Parse("pool=a,tier in (gpu),zone!=x,env in (a,b)")
	if err != nil {
		t.Fatal(err)
	}

	list, err := p.GetExternalMetric(ctx, "ns1", selector, provider.ExternalMetricInfo{Metric: "load-index"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("got %d items, want 1", len(list.Items))
	}
	item := list.Items[0]
	if item.MetricName != "load-index" || item.Value.MilliValue() != 1234 {
		t.Errorf("got %s = %s, want load-index = 1234m", item.MetricName, item.Value.String())
	}
	if diff := cmp.Diff(map[string]string{"pool": "a", "tier": "gpu"}, item.MetricLabels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]read{{"ns1", selector.String()}}, reads, cmp.AllowUnexported(read{})); diff != "" {
		t.Errorf("reads (-want +got):\n%s", diff)
	}

	_, err = p.GetExternalMetric(ctx, "ns1", labels.Everything(), provider.ExternalMetricInfo{Metric: "other"})
	if !apierrors.IsNotFound(err) {
		t.Errorf("an unknown metric: got %v, want NotFound", err)
	}
	_, err = p.GetExternalMetric(ctx, "ns1", labels.Everything(), provider.ExternalMetricInfo{Metric: "broken"})
	if err == nil || apierrors.IsNotFound(err) {
		t.Errorf("a failing source: got %v, want an error that is not NotFound", err)
	}
	if len(reads) != 1 {
		t.Errorf("the source was read %d times, want 1", len(reads))
	}

	want := []provider.ExternalMetricInfo{{Metric: "broken"}, {Metric: "load-index"}}
	if diff := cmp.Diff(want, p.ListAllExternalMetrics()); diff != "" {
		t.Errorf("ListAllExternalMetrics (-want +got):\n%s", diff)
	}
}
