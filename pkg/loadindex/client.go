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

// newClient resolves auth's Secrets and builds the transport. TLS is verified
// against the CA from the Secret, or the system roots without one, and only
// skipped when auth says so explicitly.
func newClient(ctx context.Context, auth *gputaskv1.SourceAuth, namespace string, secrets SecretGetter, timeout time.Duration) (*client, error) {
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

// sameHostRedirect follows redirects only within the configured host. Go
// drops the Authorization header on a redirect to another host, but not
// custom headers, which may carry an API key from a Secret.
func sameHostRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if req.URL.Host != via[0].URL.Host {
		return fmt.Errorf("refusing redirect to another host %q", req.URL.Host)
	}
	return nil
}

// StatusError is a non-2xx answer. It matches ErrStatus with errors.Is.
type StatusError struct {
	Code int
	// Body is the start of the answer, to help tell why.
	Body string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%v %d", ErrStatus, e.Code)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Is makes errors.Is(err, ErrStatus) true.
func (e *StatusError) Is(target error) bool { return target == ErrStatus }

// maxErrorSnippet bounds how much of an error answer lands in a condition message.
const maxErrorSnippet = 200

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
		return data, fmt.Errorf("%s %s: %w", method, redact(target), &StatusError{Code: resp.StatusCode, Body: snippet(data)})
	}
	return data, nil
}

// wrapTransportError turns our own deadline into ErrTimeout. A cancelled
// parent context (shutdown) is passed through as it is.
func (c *client) wrapTransportError(ctx context.Context, method, target string, err error) error {
	if errors.Is(err, ErrBodyTooLarge) {
		return err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: %w after %v", method, redact(target), ErrTimeout, c.timeout)
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		// url.Error repeats the method and URL; keep only the cause.
		err = uerr.Err
	}
	return fmt.Errorf("%s %s: %w", method, redact(target), err)
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

func snippet(data []byte) string {
	s := strings.TrimSpace(string(data))
	if len(s) > maxErrorSnippet {
		s = s[:maxErrorSnippet] + "..."
	}
	return s
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
