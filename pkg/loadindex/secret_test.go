package loadindex

import (
	"context"
	"errors"
	"strings"
	"testing"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

func TestKubeSecrets(t *testing.T) {
	client := kubefake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds",
			Annotations: map[string]string{gputaskv1.AnnotationLoadIndexAccess: "web"}},
		Data: map[string][]byte{"token": []byte("abc")},
	})
	secrets := KubeSecrets{Client: client}
	ctx := ForSet(context.Background(), "web")
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

func TestKubeSecretsOptIn(t *testing.T) {
	secret := func(name string, annotations map[string]string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: annotations},
			Data:       map[string][]byte{"token": []byte("abc")},
		}
	}
	access := func(v string) map[string]string { return map[string]string{gputaskv1.AnnotationLoadIndexAccess: v} }
	tests := []struct {
		name   string
		secret *corev1.Secret
		set    string
		want   bool
	}{
		{name: "no annotation", secret: secret("s", nil), set: "web", want: false},
		{name: "other annotations only", secret: secret("s", map[string]string{"a": "web"}), set: "web", want: false},
		{name: "listed alone", secret: secret("s", access("web")), set: "web", want: true},
		{name: "listed among others", secret: secret("s", access("batch, web ,api")), set: "web", want: true},
		{name: "not listed", secret: secret("s", access("batch,api")), set: "web", want: false},
		{name: "prefix is not a match", secret: secret("s", access("web2")), set: "web", want: false},
		{name: "wildcard", secret: secret("s", access("*")), set: "web", want: true},
		{name: "empty list", secret: secret("s", access("")), set: "web", want: false},
		{name: "no set in the context", secret: secret("s", access("*")), set: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OptsIn(tt.secret, tt.set); got != tt.want {
				t.Errorf("OptsIn = %v, want %v", got, tt.want)
			}
			secrets := KubeSecrets{Client: kubefake.NewClientset(tt.secret)}
			ctx := context.Background()
			if tt.set != "" {
				ctx = ForSet(ctx, tt.set)
			}
			got, err := secrets.SecretKey(ctx, "ns", *secretRef("s", "token"))
			if tt.want {
				if err != nil || string(got) != "abc" {
					t.Fatalf("SecretKey = %q, %v; want abc", got, err)
				}
				return
			}
			if !errors.Is(err, ErrSecretNotAllowed) || got != nil {
				t.Fatalf("SecretKey = %q, %v; want ErrSecretNotAllowed", got, err)
			}
			// The condition built from this error names the Secret.
			if !strings.Contains(err.Error(), "secret ns/s") {
				t.Errorf("error %q does not name the secret", err)
			}
		})
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
