package loadindex

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SecretGetter reads one key of a Secret.
type SecretGetter interface {
	// SecretKey returns the value of sel.Key in Secret sel.Name. It returns
	// nil and no error when the Secret or key is missing and sel is optional.
	SecretKey(ctx context.Context, namespace string, sel corev1.SecretKeySelector) ([]byte, error)
}

// KubeSecrets reads Secrets with a direct GET. Sources are built rarely (once
// per set and metric spec), so a Secret informer, which would cache every
// Secret of the cluster in memory, is not worth it.
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
	value, ok := secret.Data[sel.Key]
	if !ok {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %s/%s has no key %q", namespace, sel.Name, sel.Key)
	}
	return value, nil
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
