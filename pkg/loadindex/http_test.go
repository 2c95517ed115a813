package loadindex

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	corev1 "k8s.io/api/core/v1"
)

// fakeSecrets maps "name/key" to a value, all in one namespace.
type fakeSecrets map[string]string

func (f fakeSecrets) SecretKey(_ context.Context, _ string, sel corev1.SecretKeySelector) ([]byte, error) {
	v, ok := f[sel.Name+"/"+sel.Key]
	if !ok {
		if sel.Optional != nil && *sel.Optional {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %s has no key %q", sel.Name, sel.Key)
	}
	return []byte(v), nil
}

func secretRef(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

// serve starts a 127.0.0.1 server answering every request with handler.
func serve(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

func jsonBody(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}
}

func httpMetric(u string, mutate ...func(*gputaskv1.HTTPSource)) gputaskv1.MetricSpec {
	h := &gputaskv1.HTTPSource{URL: u}
	for _, m := range mutate {
		m(h)
	}
	return gputaskv1.MetricSpec{Name: "queue", HTTP: h}
}

// newLoopback builds a source that may reach the test servers, which listen
// on loopback.
func newLoopback(ctx context.Context, spec gputaskv1.MetricSpec, namespace string, secrets SecretGetter) (Source, error) {
	return Factory{Secrets: secrets, Destinations: &DestinationPolicy{AllowLoopback: true}}.New(ctx, spec, namespace)
}

func mustNew(t *testing.T, spec gputaskv1.MetricSpec, secrets SecretGetter) Source {
	t.Helper()
	src, err := newLoopback(context.Background(), spec, "ns", secrets)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return src
}

func TestHTTPSourceReads(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		location string
		want     float64
	}{
		{name: "default location", body: `{"data":{"load_balance":0.83}}`, want: 0.83},
		{name: "numeric string", body: `{"data":{"load_balance":" 0.5 "}}`, want: 0.5},
		{name: "nested and array index", body: `{"data":{"items":[{"v":1},{"v":2.5}]}}`, location: "data.items.1.v", want: 2.5},
		{name: "zero", body: `{"data":{"load_balance":0}}`, want: 0},
		{name: "exponent", body: `{"data":{"load_balance":1e2}}`, want: 100},
		{name: "top-level array", body: `[3]`, location: "0", want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, jsonBody(tt.body))
			src := mustNew(t, httpMetric(srv.URL, func(h *gputaskv1.HTTPSource) { h.ValueLocation = tt.location }), nil)
			got, err := src.Read(context.Background())
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if got != tt.want {
				t.Errorf("Read = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHTTPSourceFailures(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr error
		wantMsg string
	}{
		{name: "non-2xx", handler: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "backend down", http.StatusServiceUnavailable)
		}, wantErr: ErrStatus, wantMsg: "503"},
		{name: "bad JSON", handler: jsonBody(`{"data":`), wantErr: ErrBadJSON},
		{name: "trailing data", handler: jsonBody(`{"data":{"load_balance":1}} x`), wantErr: ErrBadJSON},
		{name: "missing field", handler: jsonBody(`{"data":{}}`), wantErr: ErrMissingField, wantMsg: "data.load_balance"},
		{name: "non-numeric string", handler: jsonBody(`{"data":{"load_balance":"high"}}`), wantErr: ErrNotNumber},
		{name: "boolean", handler: jsonBody(`{"data":{"load_balance":true}}`), wantErr: ErrNotNumber},
		{name: "null", handler: jsonBody(`{"data":{"load_balance":null}}`), wantErr: ErrNotNumber},
		{name: "NaN string", handler: jsonBody(`{"data":{"load_balance":"NaN"}}`), wantErr: ErrNaN},
		{name: "+Inf string", handler: jsonBody(`{"data":{"load_balance":"+Inf"}}`), wantErr: ErrInf},
		{name: "-Inf string", handler: jsonBody(`{"data":{"load_balance":"-Inf"}}`), wantErr: ErrInf},
		{name: "overflowing number", handler: jsonBody(`{"data":{"load_balance":1e400}}`), wantErr: ErrInf},
		{name: "negative", handler: jsonBody(`{"data":{"load_balance":-0.1}}`), wantErr: ErrNegative},
		{name: "body over cap", handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"pad":"`))
			_, _ = w.Write([]byte(strings.Repeat("x", MaxBodyBytes)))
			_, _ = w.Write([]byte(`"}`))
		}, wantErr: ErrBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, tt.handler)
			_, err := mustNew(t, httpMetric(srv.URL), nil).Read(context.Background())
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Read error = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(Detail(err), tt.wantMsg) {
				t.Errorf("Read error's detail %q does not mention %q", Detail(err), tt.wantMsg)
			}
		})
	}
}

func TestHTTPSourceTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	spec := httpMetric(srv.URL, func(h *gputaskv1.HTTPSource) {
		h.Timeout = &gputaskv1.Duration{Duration: 50 * time.Millisecond}
	})
	start := time.Now()
	_, err := mustNew(t, spec, nil).Read(context.Background())
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Read error = %v, want ErrTimeout", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Read took %v, want about the 50ms timeout", elapsed)
	}
}

func TestHTTPSourceCancelledIsNotTimeout(t *testing.T) {
	srv := serve(t, jsonBody(`{"data":{"load_balance":1}}`))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := mustNew(t, httpMetric(srv.URL), nil).Read(ctx)
	if err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("Read error = %v, want a cancellation that is not ErrTimeout", err)
	}
}

func TestHTTPSourceSendsMethodHeadersAndToken(t *testing.T) {
	var got *http.Request
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		jsonBody(`{"data":{"load_balance":0.2}}`)(w, r)
	})
	inline := "inline-value"
	spec := httpMetric(srv.URL, func(h *gputaskv1.HTTPSource) {
		h.Method = "POST"
		h.Headers = []gputaskv1.HTTPHeader{
			{Name: "X-Inline", Value: &inline},
			{Name: "X-Api-Key", ValueFrom: secretRef("api", "key")},
		}
		h.Auth = &gputaskv1.SourceAuth{BearerTokenSecretRef: secretRef("token", "token")}
	})
	secrets := fakeSecrets{"api/key": "k3y\n", "token/token": "s3cret\n"}
	f := Factory{Secrets: secrets, Destinations: &DestinationPolicy{AllowLoopback: true}, AllowPOST: true}
	src, err := f.New(context.Background(), spec, "ns")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := src.Read(context.Background()); err != nil {
		t.Fatalf("Read: %v", err)
	}
	if got.Method != http.MethodPost {
		t.Errorf("method = %s, want POST", got.Method)
	}
	for header, want := range map[string]string{
		"X-Inline": "inline-value", "X-Api-Key": "k3y", "Authorization": "Bearer s3cret",
	} {
		if v := got.Header.Get(header); v != want {
			t.Errorf("header %s = %q, want %q", header, v, want)
		}
	}
}

func TestHTTPSourceReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(jsonBody(`{"data":{"load_balance":0.2}}`))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	src := mustNew(t, httpMetric(srv.URL), nil)
	for i := 0; i < 5; i++ {
		if _, err := src.Read(context.Background()); err != nil {
			t.Fatalf("Read %d: %v", i, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("opened %d connections for 5 reads, want 1", n)
	}
}

func tlsServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(jsonBody(`{"data":{"load_balance":0.7}}`))
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, string(caPEM)
}

func TestHTTPSourceTLS(t *testing.T) {
	srv, caPEM := tlsServer(t)
	secrets := fakeSecrets{"ca/ca.crt": caPEM, "junk/ca.crt": "not a certificate"}

	t.Run("verified with CA from secret", func(t *testing.T) {
		spec := httpMetric(srv.URL, func(h *gputaskv1.HTTPSource) {
			h.Auth = &gputaskv1.SourceAuth{CASecretRef: secretRef("ca", "ca.crt")}
		})
		if v, err := mustNew(t, spec, secrets).Read(context.Background()); err != nil || v != 0.7 {
			t.Fatalf("Read = %v, %v; want 0.7", v, err)
		}
	})
	t.Run("rejected without CA", func(t *testing.T) {
		_, err := mustNew(t, httpMetric(srv.URL), secrets).Read(context.Background())
		if Class(err) != string(ClassTLS) || !strings.Contains(Detail(err), "certificate") {
			t.Fatalf("Read error = %v (%s), want a certificate error", err, Detail(err))
		}
	})
	t.Run("insecureSkipVerify", func(t *testing.T) {
		spec := httpMetric(srv.URL, func(h *gputaskv1.HTTPSource) {
			h.Auth = &gputaskv1.SourceAuth{InsecureSkipVerify: true}
		})
		if _, err := mustNew(t, spec, secrets).Read(context.Background()); err != nil {
			t.Fatalf("Read: %v", err)
		}
	})
	t.Run("secret without PEM is a config error", func(t *testing.T) {
		spec := httpMetric(srv.URL, func(h *gputaskv1.HTTPSource) {
			h.Auth = &gputaskv1.SourceAuth{CASecretRef: secretRef("junk", "ca.crt")}
		})
		_, err := newLoopback(context.Background(), spec, "ns", secrets)
		if err == nil || !strings.Contains(err.Error(), `metric "queue": http.auth.caSecretRef`) {
			t.Fatalf("New error = %v, want a caSecretRef error", err)
		}
	})
}

func TestNewConfigErrors(t *testing.T) {
	empty := ""
	tests := []struct {
		name string
		spec gputaskv1.MetricSpec
		want string
	}{
		{name: "neither source", spec: gputaskv1.MetricSpec{Name: "queue"}, want: `metric "queue": exactly one of http or prometheus`},
		{name: "both sources", spec: gputaskv1.MetricSpec{Name: "queue", HTTP: &gputaskv1.HTTPSource{URL: "http://a"},
			Prometheus: &gputaskv1.PrometheusSource{ServerAddress: "http://b", Query: "up"}}, want: "got both"},
		{name: "empty url", spec: httpMetric(""), want: `metric "queue": http.url: must be set`},
		{name: "bad scheme", spec: httpMetric("ftp://x"), want: `http.url: scheme must be http or https`},
		{name: "no host", spec: httpMetric("http://"), want: `http.url: has no host`},
		{name: "unparsable url", spec: httpMetric("http://[::1"), want: `http.url: invalid URL`},
		{name: "bad method", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) { h.Method = "PUT" }), want: "http.method"},
		{name: "bad location", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) { h.ValueLocation = "data..v" }), want: "http.valueLocation"},
		{name: "query in location", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) { h.ValueLocation = `w.#(n=="y").v` }), want: "http.valueLocation"},
		{name: "POST without the option", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) { h.Method = "POST" }), want: "http.method: POST is not allowed"},
		{name: "identity header", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "X-Forwarded-For", Value: &empty}}
		}), want: "http.headers[0].name"},
		{name: "inline Authorization", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "authorization", Value: &empty}}
		}), want: "may only come from a Secret"},
		{name: "header without value", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "X"}}
		}), want: "http.headers[0]"},
		{name: "header with both", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "X", Value: &empty, ValueFrom: secretRef("a", "b")}}
		}), want: "got both"},
		{name: "missing header secret", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) {
			h.Headers = []gputaskv1.HTTPHeader{{Name: "X", ValueFrom: secretRef("nope", "k")}}
		}), want: "http.headers[0].valueFrom"},
		{name: "missing token secret", spec: httpMetric("http://x", func(h *gputaskv1.HTTPSource) {
			h.Auth = &gputaskv1.SourceAuth{BearerTokenSecretRef: secretRef("nope", "k")}
		}), want: "http.auth.bearerTokenSecretRef"},
		{name: "prometheus address", spec: gputaskv1.MetricSpec{Name: "queue", Prometheus: &gputaskv1.PrometheusSource{Query: "up"}},
			want: "prometheus.serverAddress: must be set"},
		{name: "prometheus query", spec: gputaskv1.MetricSpec{Name: "queue", Prometheus: &gputaskv1.PrometheusSource{ServerAddress: "http://p"}},
			want: "prometheus.query: must be set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), tt.spec, "ns", fakeSecrets{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestOptionalSecretMayBeMissing(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "unexpected token", http.StatusBadRequest)
			return
		}
		jsonBody(`{"data":{"load_balance":1}}`)(w, r)
	})
	optional := true
	ref := secretRef("nope", "token")
	ref.Optional = &optional
	spec := httpMetric(srv.URL, func(h *gputaskv1.HTTPSource) {
		h.Auth = &gputaskv1.SourceAuth{BearerTokenSecretRef: ref}
	})
	if _, err := mustNew(t, spec, fakeSecrets{}).Read(context.Background()); err != nil {
		t.Fatalf("Read: %v", err)
	}
}

func TestHTTPSourceRedirects(t *testing.T) {
	var gotKey string
	other := serve(t, func(w http.ResponseWriter, r *http.Request) {
		gotKey = r.Header.Get("X-Api-Key")
		jsonBody(`{"data":{"load_balance":1}}`)(w, r)
	})
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "/other":
			http.Redirect(w, r, other.URL+"/final", http.StatusFound)
		default:
			jsonBody(`{"data":{"load_balance":0.4}}`)(w, r)
		}
	})
	key := "k3y"
	withKey := func(h *gputaskv1.HTTPSource) {
		h.Headers = []gputaskv1.HTTPHeader{{Name: "X-Api-Key", Value: &key}}
	}
	if v, err := mustNew(t, httpMetric(srv.URL+"/same", withKey), nil).Read(context.Background()); err != nil || v != 0.4 {
		t.Fatalf("same-host redirect: %v, %v", v, err)
	}
	_, err := mustNew(t, httpMetric(srv.URL+"/other", withKey), nil).Read(context.Background())
	if !errors.Is(err, ErrRedirect) || !strings.Contains(Detail(err), "redirect refused: to another host") || Class(err) != string(ClassRefusedByPolicy) {
		t.Fatalf("cross-host redirect error = %v (%s), want a refusal", err, Detail(err))
	}
	if gotKey != "" {
		t.Errorf("API key leaked to another host: %q", gotKey)
	}
}

// TestHTTPSourceRedirectCarriesNoCredentials: a bearer token from a Secret
// never follows a redirect to another host, and no redirect leads from
// https to http, even on the same host and port.
func TestHTTPSourceRedirectCarriesNoCredentials(t *testing.T) {
	var gotAuth []string
	other := serve(t, func(w http.ResponseWriter, r *http.Request) {
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
		jsonBody(`{"data":{"load_balance":1}}`)(w, r)
	})
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/final", http.StatusTemporaryRedirect)
	})
	withToken := func(h *gputaskv1.HTTPSource) {
		h.Auth = &gputaskv1.SourceAuth{BearerTokenSecretRef: secretRef("token", "token")}
	}
	_, err := mustNew(t, httpMetric(srv.URL, withToken), fakeSecrets{"token/token": "s3cret"}).Read(context.Background())
	if !errors.Is(err, ErrRedirect) || len(gotAuth) != 0 {
		t.Errorf("cross-host redirect with a token: %v (%s), %d requests reached the other host; want refused and 0", err, Detail(err), len(gotAuth))
	}

	var conns atomic.Int32
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The same host and port, in clear text.
		http.Redirect(w, r, "http://"+r.Host+"/plain", http.StatusFound)
	}))
	tlsSrv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	spec := httpMetric(tlsSrv.URL, func(h *gputaskv1.HTTPSource) {
		h.Auth = &gputaskv1.SourceAuth{InsecureSkipVerify: true}
	})
	_, err = mustNew(t, spec, nil).Read(context.Background())
	if !errors.Is(err, ErrRedirect) || !strings.Contains(Detail(err), "from https to http") {
		t.Errorf("https to http redirect: %v (%s), want refused", err, Detail(err))
	}
	if Class(err) != string(ClassRefusedByPolicy) {
		t.Errorf("Class = %s, want %s", Class(err), ClassRefusedByPolicy)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections to the server, want 1: the https one, none in clear text", n)
	}
}
