package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PrometheusScrapeInterval is how often the test Prometheus scrapes its
// targets: short, so that a changed gauge reaches a query within a second or two.
const PrometheusScrapeInterval = time.Second

// PrometheusJob is the job label of every target the test Prometheus scrapes.
const PrometheusJob = "exporter"

// Prometheus is a Prometheus server on 127.0.0.1, with its configuration and
// TSDB in a directory of its own under the control plane's.
type Prometheus struct {
	*Process
	// URL is the server's base address, http://127.0.0.1:<port>, which is
	// what spec.autoscaling.metrics[].prometheus.serverAddress takes.
	URL string
	// Dir holds prometheus.yml and the TSDB.
	Dir string

	cp *ControlPlane
}

// StartPrometheus runs bin/prometheus scraping targets (host:port, serving
// /metrics in the Prometheus text format) every PrometheusScrapeInterval, and
// waits until it is ready and has scraped each target once, so that a query
// made next already sees their series. The targets must be serving by then.
// The process is stopped with the control plane, or earlier with Stop.
func (cp *ControlPlane) StartPrometheus(ctx context.Context, targets ...string) (*Prometheus, error) {
	if err := CheckBinaries(cp.BinDir, BinPrometheus); err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return nil, errors.New("starting prometheus: no targets to scrape")
	}
	var prom *Prometheus
	err := retryStart(func() (bool, error) {
		var retry bool
		var err error
		prom, retry, err = cp.startPrometheusOnce(ctx, targets)
		return retry, err
	})
	if err != nil {
		return nil, err
	}
	if err := prom.waitScraped(ctx, len(targets)); err != nil {
		prom.Stop()
		return nil, err
	}
	return prom, nil
}

func (cp *ControlPlane) startPrometheusOnce(ctx context.Context, targets []string) (*Prometheus, bool, error) {
	// A fresh directory each attempt: a TSDB left by a process that lost
	// its port may still be locked.
	dir, err := os.MkdirTemp(cp.Dir, "prometheus-")
	if err != nil {
		return nil, false, fmt.Errorf("creating the prometheus directory: %w", err)
	}
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := writePrometheusConfig(configPath, targets); err != nil {
		return nil, false, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, false, err
	}
	p, err := cp.startProcess(BinPrometheus, nil,
		"--config.file="+configPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		// Targets reach the scrape loop only at this interval, 5s by
		// default, which would hold back the first scrape for as long.
		"--scrape.discovery-reload-interval=100ms",
		"--log.level=warn",
	)
	if err != nil {
		return nil, false, err
	}
	prom := &Prometheus{Process: p, URL: "http://127.0.0.1:" + strconv.Itoa(port), Dir: dir, cp: cp}
	err = p.waitReady(ctx, componentStartTimeout, func(ctx context.Context) bool {
		_, err := cp.get(ctx, prom.URL+"/-/ready")
		return err == nil
	})
	if err != nil {
		p.Stop()
		return nil, errors.Is(err, errExited), err
	}
	return prom, false, nil
}

// writePrometheusConfig writes a configuration with one static job. It is
// JSON, which is also YAML, so that no target needs quoting by hand.
func writePrometheusConfig(path string, targets []string) error {
	interval := PrometheusScrapeInterval.String()
	config := map[string]any{
		"global": map[string]any{
			"scrape_interval":     interval,
			"scrape_timeout":      interval,
			"evaluation_interval": interval,
		},
		"scrape_configs": []any{map[string]any{
			"job_name":       PrometheusJob,
			"static_configs": []any{map[string]any{"targets": targets}},
		}},
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the prometheus configuration: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing the prometheus configuration: %w", err)
	}
	return nil
}

// waitScraped waits until n targets of the job are up.
func (p *Prometheus) waitScraped(ctx context.Context, n int) error {
	query := fmt.Sprintf(`up{job=%q} == 1`, PrometheusJob)
	var last string
	err := p.waitReady(ctx, componentStartTimeout, func(ctx context.Context) bool {
		samples, err := p.Query(ctx, query)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%d of %d targets up", len(samples), n)
		return len(samples) == n
	})
	if err != nil {
		return fmt.Errorf("waiting for prometheus to scrape its targets (%s): %w", last, err)
	}
	return nil
}

// PrometheusSample is one element of an instant vector.
type PrometheusSample struct {
	Labels map[string]string
	Value  float64
}

// Query runs an instant query and returns the vector it answers. It is for
// tests to see what a query returns; it does not go through the controller's
// Prometheus source, which is what they test.
func (p *Prometheus) Query(ctx context.Context, query string) ([]PrometheusSample, error) {
	body, err := p.cp.get(ctx, p.URL+"/api/v1/query?"+url.Values{"query": {query}}.Encode())
	if err != nil {
		return nil, fmt.Errorf("querying prometheus for %s: %w: %s", query, err, strings.TrimSpace(body))
	}
	var resp struct {
		Data struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		return nil, fmt.Errorf("querying prometheus for %s: %w", query, err)
	}
	if resp.Data.ResultType != "vector" {
		return nil, fmt.Errorf("querying prometheus for %s: result type %q, want vector", query, resp.Data.ResultType)
	}
	samples := make([]PrometheusSample, 0, len(resp.Data.Result))
	for _, r := range resp.Data.Result {
		text, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("querying prometheus for %s: sample value %q: %w", query, text, err)
		}
		samples = append(samples, PrometheusSample{Labels: r.Metric, Value: v})
	}
	return samples, nil
}
