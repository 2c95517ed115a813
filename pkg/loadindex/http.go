package loadindex

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// httpSource reads a number out of a JSON document, such as a backend's
// {"data":{"load_balance":0.83}}.
type httpSource struct {
	client *client
	method string
	url    string
	path   string
}

func newHTTPSource(ctx context.Context, spec gputaskv1.HTTPSource, namespace string, secrets SecretGetter, policy *DestinationPolicy, allowPOST bool) (*httpSource, error) {
	u, err := parseEndpoint(spec.URL)
	if err != nil {
		return nil, fmt.Errorf("http.url: %w", err)
	}
	method, err := checkMethod(spec.Method, allowPOST)
	if err != nil {
		return nil, fmt.Errorf("http.method: %w", err)
	}
	path := spec.ValueLocation
	if path == "" {
		path = DefaultValueLocation
	}
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("http.valueLocation: %w", err)
	}
	var timeout *time.Duration
	if spec.Timeout != nil {
		timeout = &spec.Timeout.Duration
	}
	c, err := newClient(ctx, spec.Auth, namespace, secrets, policy, timeoutOrDefault(timeout))
	if err != nil {
		return nil, fmt.Errorf("http.%w", err)
	}
	if err := addHeaders(ctx, c.headers, spec.Headers, namespace, secrets); err != nil {
		return nil, err
	}
	return &httpSource{client: c, method: method, url: u.String(), path: path}, nil
}

// checkMethod returns the method to send: GET by default, POST only when
// the controller's options allow it.
func checkMethod(method string, allowPOST bool) (string, error) {
	switch strings.ToUpper(method) {
	case "", http.MethodGet:
		return http.MethodGet, nil
	case http.MethodPost:
		if !allowPOST {
			return "", errors.New("POST is not allowed by the controller's options (--load-index-allow-post); use GET")
		}
		return http.MethodPost, nil
	default:
		return "", fmt.Errorf("must be GET or POST, got %q", method)
	}
}

// addHeaders resolves the configured headers, inline or from Secrets.
func addHeaders(ctx context.Context, headers http.Header, specs []gputaskv1.HTTPHeader, namespace string, secrets SecretGetter) error {
	for i, h := range specs {
		field := fmt.Sprintf("http.headers[%d]", i)
		if h.Name == "" {
			return fmt.Errorf("%s.name: must be set", field)
		}
		if err := checkHeaderName(h.Name, h.Value == nil && h.ValueFrom != nil); err != nil {
			return fmt.Errorf("%s.name: %w", field, err)
		}
		switch {
		case h.Value != nil && h.ValueFrom != nil:
			return fmt.Errorf("%s: exactly one of value or valueFrom must be set, got both", field)
		case h.Value != nil:
			headers.Add(h.Name, *h.Value)
		case h.ValueFrom != nil:
			value, err := readSecret(ctx, secrets, namespace, *h.ValueFrom)
			if err != nil {
				return fmt.Errorf("%s.valueFrom: %w", field, err)
			}
			if value != nil {
				headers.Add(h.Name, strings.TrimSpace(string(value)))
			}
		default:
			return fmt.Errorf("%s: exactly one of value or valueFrom must be set, got neither", field)
		}
	}
	return nil
}

// Read implements Source.
func (s *httpSource) Read(ctx context.Context) (float64, error) {
	var body []byte
	if s.method == http.MethodPost {
		// An empty JSON object keeps servers that insist on a body happy.
		body = []byte("{}")
	}
	data, err := s.client.do(ctx, s.method, s.url, body)
	if err != nil {
		return 0, asReadError(err)
	}
	v, err := ExtractValue(data, s.path)
	if err != nil {
		return 0, asReadError(fmt.Errorf("%s %s: %w", s.method, redact(s.url), err))
	}
	return v, nil
}
