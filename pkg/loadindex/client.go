package loadindex

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	corev1 "k8s.io/api/core/v1"
)

// client is the HTTP plumbing shared by every source: one http.Client per
// source, so connections are reused between reads, plus the resolved
// credentials and the per-read timeout.
type client struct {
	http    *http.Client
	headers http.Header
	timeout time.Duration
}

// Dialer settings of http.DefaultTransport.
const (
	defaultDialTimeout = 30 * time.Second
	defaultKeepAlive   = 30 * time.Second
)

// newClient resolves auth's Secrets and builds the transport. TLS is verified
// against the CA from the Secret, or the system roots without one, and only
// skipped when auth says so explicitly. Every connection, redirects
// included, goes through the destination policy.
func newClient(ctx context.Context, auth *gputaskv1.SourceAuth, namespace string, secrets SecretGetter, policy *DestinationPolicy, timeout time.Duration) (*client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	headers := http.Header{}
	if auth != nil {
		if auth.InsecureSkipVerify {
			tlsConfig.InsecureSkipVerify = true //nolint:gosec // explicitly asked for by the user, documented as test-only.
		}
		if err := addCA(ctx, tlsConfig, auth.CASecretRef, namespace, secrets); err != nil {
			return nil, fmt.Errorf("auth.caSecretRef: %w", err)
		}
		if err := addBearer(ctx, headers, auth, namespace, secrets); err != nil {
			return nil, fmt.Errorf("auth.bearerTokenSecretRef: %w", err)
		}
	}
	transport, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("http.DefaultTransport is not an *http.Transport")
	}
	transport = transport.Clone()
	transport.TLSClientConfig = tlsConfig
	transport.DialContext = policy.dialer().DialContext
	// Through a proxy, the dialer would only ever see the proxy's address
	// and the policy would check nothing.
	transport.Proxy = nil
	return &client{
		http:    &http.Client{Transport: transport, CheckRedirect: sameHostRedirect},
		headers: headers,
		timeout: timeout,
	}, nil
}

func addCA(ctx context.Context, cfg *tls.Config, sel *corev1.SecretKeySelector, namespace string, secrets SecretGetter) error {
	if sel == nil {
		return nil
	}
	pem, err := readSecret(ctx, secrets, namespace, *sel)
	if err != nil {
		return err
	}
	if len(pem) == 0 {
		// An optional CA that is absent leaves the system roots in place.
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("secret %s/%s key %q holds no PEM certificate", namespace, sel.Name, sel.Key)
	}
	cfg.RootCAs = pool
	return nil
}

func addBearer(ctx context.Context, headers http.Header, auth *gputaskv1.SourceAuth, namespace string, secrets SecretGetter) error {
	if auth.BearerTokenSecretRef == nil {
		return nil
	}
	token, err := readSecret(ctx, secrets, namespace, *auth.BearerTokenSecretRef)
	if err != nil {
		return err
	}
	// Secrets written with `echo` often end in a newline, which is never part of a token.
	if t := strings.TrimSpace(string(token)); t != "" {
		headers.Set("Authorization", "Bearer "+t)
	}
	return nil
}

// maxRedirects matches net/http's default limit.
const maxRedirects = 10

// redirectError is a redirect that was not followed. Its reason is our own
// text: the Location the server sent is never repeated.
type redirectError struct{ reason string }

func (e *redirectError) Error() string { return "redirect refused: " + e.reason }

// sameHostRedirect follows redirects only within the configured host, and
// never from https to http. Go drops the Authorization header on a redirect
// to another host, but not custom headers, which may carry an API key from
// a Secret, so a redirect elsewhere is not followed at all: no credential
// ever reaches a host the spec did not name. A downgrade to http would send
// the same credentials in clear text. The address a redirect leads to is
// checked by the destination policy when it is dialled.
func sameHostRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return &redirectError{reason: fmt.Sprintf("more than %d redirects", maxRedirects)}
	}
	if req.URL.Host != via[0].URL.Host {
		return &redirectError{reason: "to another host"}
	}
	for _, prev := range via {
		if prev.URL.Scheme == "https" && req.URL.Scheme != "https" {
			return &redirectError{reason: "from https to http"}
		}
	}
	return nil
}

// StatusError is a non-2xx answer. It matches ErrStatus with errors.Is. It
// holds the code only: an error body is the server's text, which must not
// reach the set's status or events.
type StatusError struct {
	Code int
}

func (e *StatusError) Error() string { return fmt.Sprintf("%v %d", ErrStatus, e.Code) }

// Is makes errors.Is(err, ErrStatus) true.
func (e *StatusError) Is(target error) bool { return target == ErrStatus }

// do sends the request within the client's timeout and returns the body of a
// 2xx answer. For any other status it returns the body along with a
// *StatusError, so a caller can parse a structured error out of it.
func (c *client) do(ctx context.Context, method, target string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	for name, values := range c.headers {
		req.Header[name] = values
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")

	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.wrapTransportError(ctx, method, target, err)
	}
	defer func() { _ = resp.Body.Close() }()

	data, err := readCapped(resp.Body)
	if err != nil {
		return nil, c.wrapTransportError(ctx, method, target, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return data, fmt.Errorf("%s %s: %w", method, redact(target), &StatusError{Code: resp.StatusCode})
	}
	return data, nil
}

// wrapTransportError turns our own deadline into ErrTimeout and any other
// failure into its class (see classifyTransport).
func (c *client) wrapTransportError(ctx context.Context, method, target string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: %w after %v", method, redact(target), ErrTimeout, c.timeout)
	}
	return fmt.Errorf("%s %s: %w", method, redact(target), classifyTransport(err))
}

// readCapped reads at most MaxBodyBytes and fails when there is more.
func readCapped(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if len(data) > MaxBodyBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, MaxBodyBytes)
	}
	return data, nil
}

// redact drops credentials and the query from a URL before it lands in
// a status message, since either may carry a secret.
func redact(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "<invalid URL>"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}

// parseEndpoint checks that raw is an absolute http(s) URL.
func parseEndpoint(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("must be set")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme must be http or https, got %q", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("has no host")
	}
	return u, nil
}
