package loadindex

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

func promMetric(addr string) gputaskv1.MetricSpec {
	return gputaskv1.MetricSpec{Name: "gpu-util", Prometheus: &gputaskv1.PrometheusSource{
		ServerAddress: addr, Query: `avg(DCGM_FI_DEV_GPU_UTIL{job="x"}) / 100`,
	}}
}

func TestPrometheusSourceQuery(t *testing.T) {
	var gotPath, gotQuery, gotAuth string
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery, gotAuth = r.URL.Path, r.URL.Query().Get("query"), r.Header.Get("Authorization")
		jsonBody(`{"status":"success","data":{"resultType":"scalar","result":[1700000000.1,"0.42"]}}`)(w, r)
	})
	spec := promMetric(srv.URL + "/prom/")
	spec.Prometheus.Auth = &gputaskv1.SourceAuth{BearerTokenSecretRef: secretRef("prom", "token")}
	v, err := mustNew(t, spec, fakeSecrets{"prom/token": "t0k"}).Read(context.Background())
	if err != nil || v != 0.42 {
		t.Fatalf("Read = %v, %v; want 0.42", v, err)
	}
	if gotPath != "/prom/api/v1/query" {
		t.Errorf("path = %q, want /prom/api/v1/query", gotPath)
	}
	if gotQuery != spec.Prometheus.Query {
		t.Errorf("query = %q, want %q", gotQuery, spec.Prometheus.Query)
	}
	if gotAuth != "Bearer t0k" {
		t.Errorf("Authorization = %q, want Bearer t0k", gotAuth)
	}
}

func TestPrometheusSourceResults(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		want    float64
		wantErr error
		wantMsg string
	}{
		{name: "vector", body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1700000000,"0.91"]}]}}`, want: 0.91},
		{name: "scalar", body: `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"3"]}}`, want: 3},
		{name: "multi", body: `{"status":"success","data":{"resultType":"vector","result":[
			{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]},{"metric":{"a":"3"},"value":[1,"3"]}]}}`,
			wantErr: ErrQuery, wantMsg: "query returned 3 series, want exactly 1"},
		{name: "empty", body: `{"status":"success","data":{"resultType":"vector","result":[]}}`, wantErr: ErrQuery, wantMsg: "query returned no series, want exactly 1"},
		{name: "matrix", body: `{"status":"success","data":{"resultType":"matrix","result":[]}}`, wantErr: ErrQuery, wantMsg: "result type matrix"},
		{name: "error status in 200", body: `{"status":"error","errorType":"execution","error":"boom"}`, wantErr: ErrQuery, wantMsg: "status is not success: execution"},
		{name: "error with HTTP 400", status: http.StatusBadRequest,
			body:    `{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": parse error"}`,
			wantErr: ErrQuery, wantMsg: "bad_data: GET"},
		{name: "plain 502", status: http.StatusBadGateway, body: `bad gateway`, wantErr: ErrStatus, wantMsg: "502"},
		{name: "NaN sample", body: `{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}`, wantErr: ErrNaN},
		{name: "Inf sample", body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"+Inf"]}]}}`, wantErr: ErrInf},
		{name: "negative sample", body: `{"status":"success","data":{"resultType":"scalar","result":[1,"-2"]}}`, wantErr: ErrNegative},
		{name: "non-numeric sample", body: `{"status":"success","data":{"resultType":"scalar","result":[1,"abc"]}}`, wantErr: ErrNotNumber},
		{name: "short sample", body: `{"status":"success","data":{"resultType":"scalar","result":[1]}}`, wantErr: ErrBadJSON},
		{name: "bad JSON", body: `{"status":`, wantErr: ErrBadJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if tt.status != 0 {
					w.WriteHeader(tt.status)
				}
				_, _ = w.Write([]byte(tt.body))
			})
			got, err := mustNew(t, promMetric(srv.URL), nil).Read(context.Background())
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("Read = %v, %v; want %v", got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Read error = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(Detail(err), tt.wantMsg) {
				t.Errorf("Read error's detail %q does not contain %q", Detail(err), tt.wantMsg)
			}
		})
	}
}

func TestPrometheusSourceTLSWithCA(t *testing.T) {
	srv, caPEM := tlsServer(t)
	// The TLS test server answers the HTTP-source JSON, which is not a
	// Prometheus envelope; getting ErrQuery proves the TLS handshake passed.
	spec := promMetric(srv.URL)
	spec.Prometheus.Auth = &gputaskv1.SourceAuth{CASecretRef: secretRef("ca", "ca.crt")}
	_, err := mustNew(t, spec, fakeSecrets{"ca/ca.crt": caPEM}).Read(context.Background())
	if !errors.Is(err, ErrQuery) {
		t.Fatalf("Read error = %v, want ErrQuery after a verified handshake", err)
	}
	_, err = mustNew(t, promMetric(srv.URL), nil).Read(context.Background())
	if Class(err) != string(ClassTLS) || !strings.Contains(Detail(err), "certificate") {
		t.Fatalf("Read error without CA = %v (%s), want a certificate error", err, Detail(err))
	}
}
