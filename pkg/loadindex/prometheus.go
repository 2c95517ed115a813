package loadindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// prometheusSource runs an instant query that must return one sample.
type prometheusSource struct {
	client *client
	url    string
}

func newPrometheusSource(ctx context.Context, spec gputaskv1.PrometheusSource, namespace string, secrets SecretGetter, policy *DestinationPolicy) (*prometheusSource, error) {
	u, err := parseEndpoint(spec.ServerAddress)
	if err != nil {
		return nil, fmt.Errorf("prometheus.serverAddress: %w", err)
	}
	if spec.Query == "" {
		return nil, errors.New("prometheus.query: must be set")
	}
	var timeout *time.Duration
	if spec.Timeout != nil {
		timeout = &spec.Timeout.Duration
	}
	c, err := newClient(ctx, spec.Auth, namespace, secrets, policy, timeoutOrDefault(timeout))
	if err != nil {
		return nil, fmt.Errorf("prometheus.%w", err)
	}
	// JoinPath keeps a path prefix such as http://host/prometheus.
	q := u.JoinPath("api", "v1", "query")
	q.RawQuery = url.Values{"query": []string{spec.Query}}.Encode()
	return &prometheusSource{client: c, url: q.String()}, nil
}

// promResponse is the envelope of Prometheus's HTTP API.
type promResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// promSample is a vector element: labels and a [time, "value"] pair.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  []json.RawMessage `json:"value"`
}

// Read implements Source.
func (s *prometheusSource) Read(ctx context.Context) (float64, error) {
	v, err := s.read(ctx)
	return v, asReadError(err)
}

func (s *prometheusSource) read(ctx context.Context) (float64, error) {
	data, err := s.client.do(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		// Prometheus answers 400, 422 and 503 with a JSON error body whose
		// errorType says more than the status code does. Only a known
		// errorType is repeated; the error text is the server's own.
		var statusErr *StatusError
		if errors.As(err, &statusErr) {
			var resp promResponse
			if json.Unmarshal(data, &resp) == nil && resp.Status == "error" {
				return 0, fmt.Errorf("%w: %s: %w", ErrQuery, errorType(resp.ErrorType), err)
			}
		}
		return 0, err
	}
	return parsePromResponse(data)
}

// parsePromResponse returns the single finite sample of an instant query answer.
func parsePromResponse(data []byte) (float64, error) {
	var resp promResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return 0, jsonError(err)
	}
	if resp.Status != "success" {
		return 0, fmt.Errorf("%w: status is not success: %s", ErrQuery, errorType(resp.ErrorType))
	}
	switch resp.Data.ResultType {
	case "vector":
		return parseVector(resp.Data.Result)
	case "scalar":
		return parsePair(resp.Data.Result)
	case "matrix", "string":
		return 0, fmt.Errorf("%w: result type %s, want vector or scalar", ErrQuery, resp.Data.ResultType)
	default:
		return 0, fmt.Errorf("%w: unknown result type, want vector or scalar", ErrQuery)
	}
}

// errorType returns one of the errorType values that Prometheus documents,
// or "unknown error type" for anything else the server sent.
func errorType(t string) string {
	switch t {
	case "bad_data", "timeout", "canceled", "execution", "unavailable", "internal", "not_found", "not_acceptable":
		return t
	default:
		return "unknown error type"
	}
}

// jsonError reports where a document stopped being valid JSON, or the shape
// that did not fit; never its text.
func jsonError(err error) error {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("%w at byte %d", ErrBadJSON, syntaxErr.Offset)
	case errors.As(err, &typeErr):
		// typeErr.Value may quote the number found, so only the expected
		// Go type and the offset are told.
		return fmt.Errorf("%w: not a %s at byte %d", ErrBadJSON, typeErr.Type, typeErr.Offset)
	default:
		return ErrBadJSON
	}
}

func parseVector(raw json.RawMessage) (float64, error) {
	var samples []promSample
	if err := json.Unmarshal(raw, &samples); err != nil {
		return 0, fmt.Errorf("vector result: %w", jsonError(err))
	}
	switch len(samples) {
	case 0:
		// A selector that matches nothing, or a target that is down, gives
		// an empty vector: say so the way the many-series case does.
		return 0, fmt.Errorf("%w: query returned no series, want exactly 1", ErrQuery)
	case 1:
		return sampleValue(samples[0].Value)
	default:
		return 0, fmt.Errorf("%w: query returned %d series, want exactly 1", ErrQuery, len(samples))
	}
}

func parsePair(raw json.RawMessage) (float64, error) {
	var pair []json.RawMessage
	if err := json.Unmarshal(raw, &pair); err != nil {
		return 0, fmt.Errorf("scalar result: %w", jsonError(err))
	}
	return sampleValue(pair)
}

// sampleValue reads the value of a [timestamp, "value"] pair. Prometheus
// always quotes sample values, because they may be NaN or ±Inf.
func sampleValue(pair []json.RawMessage) (float64, error) {
	if len(pair) != 2 {
		return 0, fmt.Errorf("%w: sample has %d elements, want [time, value]", ErrBadJSON, len(pair))
	}
	var text string
	if err := json.Unmarshal(pair[1], &text); err != nil {
		return 0, fmt.Errorf("sample value is not a string: %w", jsonError(err))
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: the sample value", ErrNotNumber)
	}
	return checkValue(v)
}
