package loadindex

import (
	"context"
	"strings"
	"testing"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

func TestKubeSecrets(t *testing.T) {
	client := kubefake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"},
		Data:       map[string][]byte{"token": []byte("abc")},
	})
	secrets := KubeSecrets{Client: client}
	ctx := context.Background()
	optional := true

	got, err := secrets.SecretKey(ctx, "ns", *secretRef("creds", "token"))
	if err != nil || string(got) != "abc" {
		t.Fatalf("SecretKey = %q, %v; want abc", got, err)
	}
	if _, err := secrets.SecretKey(ctx, "ns", *secretRef("creds", "other")); err == nil || !strings.Contains(err.Error(), `no key "other"`) {
		t.Errorf("missing key error = %v", err)
	}
	if _, err := secrets.SecretKey(ctx, "ns", *secretRef("nope", "token")); err == nil || !strings.Contains(err.Error(), "ns/nope") {
		t.Errorf("missing secret error = %v", err)
	}
	// Secrets are namespaced: the same name elsewhere is not found.
	if _, err := secrets.SecretKey(ctx, "other", *secretRef("creds", "token")); err == nil {
		t.Error("read a secret from the wrong namespace")
	}
	ref := secretRef("nope", "token")
	ref.Optional = &optional
	if got, err := secrets.SecretKey(ctx, "ns", *ref); err != nil || got != nil {
		t.Errorf("optional missing secret = %q, %v; want nil, nil", got, err)
	}
}

func TestReadSecretNeedsAGetterAndAName(t *testing.T) {
	spec := httpMetric("http://127.0.0.1:1", func(h *gputaskv1.HTTPSource) {
		h.Auth = &gputaskv1.SourceAuth{BearerTokenSecretRef: secretRef("token", "token")}
	})
	if _, err := New(context.Background(), spec, "ns", nil); err == nil || !strings.Contains(err.Error(), "no secret reader") {
		t.Errorf("New without a SecretGetter: %v", err)
	}
	spec.HTTP.Auth.BearerTokenSecretRef = secretRef("", "token")
	if _, err := New(context.Background(), spec, "ns", fakeSecrets{}); err == nil || !strings.Contains(err.Error(), "secret name and key must be set") {
		t.Errorf("New with an empty secret name: %v", err)
	}
}
