package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// KueueNamespace is where Kueue keeps its own objects; its webhooks leave
// the pods there (and in kube-system) alone, as its Helm chart sets them.
const KueueNamespace = "kueue-system"

// kueueManifests is the directory, next to the binaries, where make tools
// puts the CRDs and webhook configurations of the Kueue release it built.
const kueueManifests = "kueue-manifests"

// kueueConfig is Kueue's configuration: its pod integration on, every
// server on 127.0.0.1, certificates from the test CA, no leader election.
const kueueConfig = `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: ` + KueueNamespace + `
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: 127.0.0.1:%d
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks: ["pod"]
`

// Kueue is a running Kueue controller of the control plane.
type Kueue struct {
	cp *ControlPlane
	// Process is the running Kueue; Stop and Start replace it.
	Process    *Process
	args, env  []string
	healthPort int
}

// StartKueue installs the CRDs of the Kueue release that make tools built,
// starts Kueue with its pod integration, and points its admission and
// conversion webhooks at it, on 127.0.0.1 with a certificate of the test CA.
// It returns once Kueue's pod webhook gates a pod that names a queue. Kueue
// stops with the control plane.
func (cp *ControlPlane) StartKueue(ctx context.Context) (*Kueue, error) {
	if err := CheckBinaries(cp.BinDir, BinKueue); err != nil {
		return nil, err
	}
	manifests := filepath.Join(cp.BinDir, kueueManifests)
	dir := filepath.Join(cp.Dir, "kueue")
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return nil, err
	}
	for name, src := range map[string]string{"tls.crt": cp.pki.ServingCert, "tls.key": cp.pki.ServingKey} {
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	// Kueue binds the ports its configuration names; one that another
	// process took first makes it exit, and it is started again on others.
	var k *Kueue
	var webhookURL string
	err := retryStart(func() (bool, error) {
		ports := make([]int, 3)
		for i := range ports {
			port, err := FreePort()
			if err != nil {
				return false, err
			}
			ports[i] = port
		}
		healthPort, metricsPort, webhookPort := ports[0], ports[1], ports[2]
		configPath := filepath.Join(dir, "config.yaml")
		config := fmt.Sprintf(kueueConfig, healthPort, metricsPort, webhookPort, certDir)
		if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
			return false, err
		}
		webhookURL = "https://127.0.0.1:" + strconv.Itoa(webhookPort)
		if err := cp.installKueueCRDs(ctx, filepath.Join(manifests, "crds"), webhookURL); err != nil {
			return false, err
		}
		_, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating namespace %s: %w", KueueNamespace, err)
		}
		k = &Kueue{
			cp: cp,
			// VisibilityOnDemand would serve Kueue's visibility API on every
			// interface; the tests do not read it.
			args:       []string{"--config=" + configPath, "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"},
			env:        []string{"KUBECONFIG=" + cp.KubeconfigPath, "KUEUE_METRICS_CERT_DIR=" + certDir},
			healthPort: healthPort,
		}
		err = k.Start(ctx)
		return errors.Is(err, errExited), err
	})
	if err != nil {
		return nil, err
	}
	if err := cp.installKueueWebhooks(ctx, filepath.Join(manifests, "webhooks.yaml"), webhookURL); err != nil {
		return nil, err
	}
	if err := cp.waitKueueGates(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// Start starts Kueue, after Stop, with the same configuration, and waits
// until it is ready.
func (k *Kueue) Start(ctx context.Context) error {
	p, err := k.cp.startBinary(BinKueue, filepath.Join(k.cp.BinDir, BinKueue), k.env, k.args...)
	if err != nil {
		return err
	}
	k.Process = p
	readyz := "http://127.0.0.1:" + strconv.Itoa(k.healthPort) + "/readyz"
	err = p.waitReady(ctx, componentStartTimeout, func(ctx context.Context) bool {
		body, err := k.cp.get(ctx, readyz)
		return err == nil && strings.TrimSpace(body) == "ok"
	})
	if err != nil {
		p.Stop()
		return fmt.Errorf("starting kueue: %w; last log lines of %s:\n%s", err, p.LogPath, p.LogTail(20))
	}
	return nil
}

// Stop stops Kueue with SIGTERM and waits for it to exit. Its webhooks stay
// configured, so creates they intercept fail until Start.
func (k *Kueue) Stop() { k.Process.Stop() }

// installKueueCRDs installs Kueue's CRDs with their conversion webhooks at
// url, as Kueue's own kustomization does for those it converts.
func (cp *ControlPlane) installKueueCRDs(ctx context.Context, dir, url string) error {
	crds, err := readCRDs(dir)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if len(crd.Spec.Versions) > 1 {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To(url + "/convert"), CABundle: cp.pki.CACertPEM},
					ConversionReviewVersions: []string{"v1"},
				},
			}
		}
	}
	return cp.installCRDs(ctx, crds)
}

// installKueueWebhooks creates Kueue's admission webhooks for pods and for
// its own API, each pointed at url; those of the integrations that are off
// are left out. The pod webhooks skip kube-system and Kueue's namespace, as
// in Kueue's Helm chart.
func (cp *ControlPlane) installKueueWebhooks(ctx context.Context, path, url string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var typeMeta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &typeMeta); err != nil {
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		switch typeMeta.Kind {
		case "MutatingWebhookConfiguration":
			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict([]byte(doc), cfg); err != nil {
				return fmt.Errorf("decoding %s: %w", path, err)
			}
			cfg.Name = "kueue-" + cfg.Name
			cfg.Webhooks = keepKueueWebhooks(cp, cfg.Webhooks, url, func(w *admissionregistrationv1.MutatingWebhook) kueueWebhook {
				return kueueWebhook{&w.ClientConfig, &w.NamespaceSelector, w.Rules}
			})
			_, err = cp.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
		case "ValidatingWebhookConfiguration":
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict([]byte(doc), cfg); err != nil {
				return fmt.Errorf("decoding %s: %w", path, err)
			}
			cfg.Name = "kueue-" + cfg.Name
			cfg.Webhooks = keepKueueWebhooks(cp, cfg.Webhooks, url, func(w *admissionregistrationv1.ValidatingWebhook) kueueWebhook {
				return kueueWebhook{&w.ClientConfig, &w.NamespaceSelector, w.Rules}
			})
			_, err = cp.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Kueue's %s: %w", typeMeta.Kind, err)
		}
	}
	return nil
}

// kueueWebhook is what keepKueueWebhooks reads and changes of a mutating
// or validating webhook.
type kueueWebhook struct {
	cc    *admissionregistrationv1.WebhookClientConfig
	sel   **metav1.LabelSelector
	rules []admissionregistrationv1.RuleWithOperations
}

// keepKueueWebhooks returns the webhooks of Kueue's to keep (those that
// watch pods or Kueue's own API), each pointed at url.
func keepKueueWebhooks[W any](cp *ControlPlane, webhooks []W, url string, fields func(*W) kueueWebhook) []W {
	var keep []W
	for i := range webhooks {
		f := fields(&webhooks[i])
		if cp.pointKueueWebhook(f, url) {
			keep = append(keep, webhooks[i])
		}
	}
	return keep
}

// pointKueueWebhook reports whether a webhook of Kueue's is one to keep
// and, if so, points it at url.
func (cp *ControlPlane) pointKueueWebhook(w kueueWebhook, url string) bool {
	cc, rules := w.cc, w.rules
	pods := slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "pods")
	})
	own := slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return slices.Contains(r.APIGroups, "kueue.x-k8s.io")
	})
	if (!pods && !own) || cc.Service == nil || cc.Service.Path == nil {
		return false
	}
	cc.URL = ptr.To(url + *cc.Service.Path)
	cc.Service = nil
	cc.CABundle = cp.pki.CACertPEM
	if pods {
		*w.sel = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem, KueueNamespace},
		}}}
	}
	return true
}

// waitKueueGates waits until Kueue's pod webhook is called: a pod that
// names a queue, created as a dry run, comes back with Kueue's gate.
func (cp *ControlPlane) waitKueueGates(ctx context.Context) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kueue-probe", Namespace: metav1.NamespaceDefault, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "probe"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe"}}},
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, componentStartTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := cp.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		last = errors.New("the pod came back without Kueue's scheduling gate")
		return slices.ContainsFunc(got.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
			return strings.HasPrefix(g.Name, "kueue.x-k8s.io/")
		}), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Kueue's pod webhook: %w (%v)", err, last)
	}
	return nil
}
