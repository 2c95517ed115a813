package loadindex

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// SecretGetter reads one key of a Secret.
type SecretGetter interface {
	// SecretKey returns the value of sel.Key in Secret sel.Name. It returns
	// nil and no error when the Secret or key is missing and sel is optional.
	SecretKey(ctx context.Context, namespace string, sel corev1.SecretKeySelector) ([]byte, error)
}

// ErrSecretNotAllowed is a Secret that does not opt in to the set that
// names it; see gputaskv1.AnnotationLoadIndexAccess.
var ErrSecretNotAllowed = errors.New("secret not open to this GPUTaskSet")

type setKey struct{}

// ForSet returns a context saying that the sources built with it serve the
// GPUTaskSet name. KubeSecrets hands a Secret only to a set that the Secret
// lists, and to no one when the context names no set.
func ForSet(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, setKey{}, name)
}

func setFrom(ctx context.Context) string {
	name, _ := ctx.Value(setKey{}).(string)
	return name
}

// KubeSecrets reads Secrets with a direct GET. Sources are built rarely (once
// per set and metric spec), so a Secret informer, which would cache every
// Secret of the cluster in memory, is not worth it.
//
// A Secret is only read on behalf of a set when its annotation
// gputask.io/load-index-access lists the set (or is "*"). The
// ValidatingAdmissionPolicy shipped with the CRDs already refuses a set
// whose author may not read the Secret; the annotation also holds where that
// policy is not installed, and keeps a Secret's owner in charge of which
// sets may send it out.
type KubeSecrets struct {
	Client kubernetes.Interface
}

var _ SecretGetter = KubeSecrets{}

// SecretKey implements SecretGetter.
func (k KubeSecrets) SecretKey(ctx context.Context, namespace string, sel corev1.SecretKeySelector) ([]byte, error) {
	optional := sel.Optional != nil && *sel.Optional
	secret, err := k.Client.CoreV1().Secrets(namespace).Get(ctx, sel.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: %w", namespace, sel.Name, err)
	}
	if set := setFrom(ctx); !OptsIn(secret, set) {
		return nil, fmt.Errorf("%w: secret %s/%s: its annotation %s does not list GPUTaskSet %q",
			ErrSecretNotAllowed, namespace, sel.Name, gputaskv1.AnnotationLoadIndexAccess, set)
	}
	value, ok := secret.Data[sel.Key]
	if !ok {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %s/%s has no key %q", namespace, sel.Name, sel.Key)
	}
	return value, nil
}

// OptsIn reports whether secret's gputask.io/load-index-access annotation
// lets GPUTaskSet set (of the Secret's namespace) use it: a comma-separated
// list of set names, or "*" for every set. An empty set name never matches.
func OptsIn(secret *corev1.Secret, set string) bool {
	if set == "" {
		return false
	}
	list, ok := secret.Annotations[gputaskv1.AnnotationLoadIndexAccess]
	if !ok {
		return false
	}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "*" || name == set {
			return true
		}
	}
	return false
}

// readSecret reads sel through secrets, refusing a nil getter with a clear error.
func readSecret(ctx context.Context, secrets SecretGetter, namespace string, sel corev1.SecretKeySelector) ([]byte, error) {
	if sel.Name == "" || sel.Key == "" {
		return nil, fmt.Errorf("secret name and key must be set")
	}
	if secrets == nil {
		return nil, fmt.Errorf("secret %s/%s: no secret reader configured", namespace, sel.Name)
	}
	return secrets.SecretKey(ctx, namespace, sel)
}
