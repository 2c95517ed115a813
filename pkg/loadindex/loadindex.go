// Package loadindex reads the load index that drives a GPUTaskSet's
// autoscaler. Each kind of source (an HTTP JSON endpoint, a Prometheus
// instant query) is one small type behind the Source interface, with its own
// config parsing, so adding a source never touches the scaling logic.
package loadindex

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// Source reads one load index.
type Source interface {
	// Read returns the current value: finite and not negative, or a
	// *ReadError whose message is its coarse class only (unreachable, TLS,
	// HTTP 4xx, HTTP 5xx, invalid answer, not a number, refused by policy),
	// fit for a condition, an event or a metric label. The precise cause is
	// for the controller's log: see Detail.
	Read(ctx context.Context) (float64, error)
}

// Defaults documented on the API types.
const (
	DefaultTimeout       = 5 * time.Second
	DefaultValueLocation = "data.load_balance"
	// MaxBodyBytes caps how much of an answer is read, so a misbehaving
	// endpoint cannot make the controller buffer an unbounded document.
	MaxBodyBytes = 1 << 20
)

// Errors a read can fail with. They are wrapped with context, so match them
// with errors.Is.
var (
	ErrTimeout      = errors.New("timed out")
	ErrStatus       = errors.New("unexpected HTTP status")
	ErrBadJSON      = errors.New("invalid JSON")
	ErrMissingField = errors.New("field not found")
	ErrNotNumber    = errors.New("value is not a number")
	ErrNaN          = errors.New("value is NaN")
	ErrInf          = errors.New("value is infinite")
	ErrNegative     = errors.New("value is negative")
	ErrBodyTooLarge = errors.New("response body too large")
	ErrQuery        = errors.New("query failed")
)

// Factory builds sources that share one Secret reader and one destination
// policy. Its New method has the shape of the autoscaler's NewSourceFunc.
type Factory struct {
	// Secrets reads the Secrets that specs name.
	Secrets SecretGetter
	// Destinations says which addresses sources may connect to. Nil is the
	// zero DestinationPolicy, which refuses every address that is always
	// refused (see DestinationPolicy).
	Destinations *DestinationPolicy
	// AllowPOST lets an http source use method POST
	// (--load-index-allow-post). Without it only GET is sent: a POST to a
	// URL of the author's choice, from the controller's network position,
	// may change something there, where a GET only reads.
	AllowPOST bool
}

// New builds the source that spec describes. Secrets named by the spec are
// read once here, from namespace, for the set that ForSet put in ctx; a
// changed Secret takes effect when the caller builds the source again.
// Errors name the metric and the field.
func (f Factory) New(ctx context.Context, spec gputaskv1.MetricSpec, namespace string) (Source, error) {
	policy := f.Destinations
	if policy == nil {
		policy = &DestinationPolicy{}
	}
	src, err := newSource(ctx, spec, namespace, f.Secrets, policy, f.AllowPOST)
	if err != nil {
		return nil, fmt.Errorf("metric %q: %w", spec.Name, err)
	}
	return src, nil
}

// New builds the source that spec describes with the default destination
// policy; see Factory.New.
func New(ctx context.Context, spec gputaskv1.MetricSpec, namespace string, secrets SecretGetter) (Source, error) {
	return Factory{Secrets: secrets}.New(ctx, spec, namespace)
}

func newSource(ctx context.Context, spec gputaskv1.MetricSpec, namespace string, secrets SecretGetter, policy *DestinationPolicy, allowPOST bool) (Source, error) {
	switch {
	case spec.HTTP != nil && spec.Prometheus != nil:
		return nil, errors.New("exactly one of http or prometheus must be set, got both")
	case spec.HTTP != nil:
		return newHTTPSource(ctx, *spec.HTTP, namespace, secrets, policy, allowPOST)
	case spec.Prometheus != nil:
		return newPrometheusSource(ctx, *spec.Prometheus, namespace, secrets, policy)
	default:
		return nil, errors.New("exactly one of http or prometheus must be set, got neither")
	}
}

// checkValue rejects values the autoscaler cannot act on. The value itself
// is left out of the error, as all of the answer is.
func checkValue(v float64) (float64, error) {
	switch {
	case math.IsNaN(v):
		return 0, ErrNaN
	case math.IsInf(v, 0):
		return 0, ErrInf
	case v < 0:
		return 0, ErrNegative
	}
	return v, nil
}

func timeoutOrDefault(d *time.Duration) time.Duration {
	if d == nil || *d <= 0 {
		return DefaultTimeout
	}
	return *d
}
