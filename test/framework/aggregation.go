package framework

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// FrontProxyClientName is the common name of the client certificate that
// kube-apiserver presents to extension API servers; they accept the
// requestheader identity only from it (--requestheader-allowed-names).
const FrontProxyClientName = "front-proxy-client"

// The requestheader headers, as kubeadm configures them.
const (
	RequestHeaderUser        = "X-Remote-User"
	RequestHeaderGroup       = "X-Remote-Group"
	RequestHeaderExtraPrefix = "X-Remote-Extra-"
)

// frontProxyPKI is the second CA of the aggregation layer: it signs only the
// API server's proxy client certificate, so that an extension server that
// trusts it for requestheader identities trusts no other client.
type frontProxyPKI struct {
	CACert, ClientCert, ClientKey string
}

// addFrontProxy writes the front-proxy CA and the API server's proxy client
// certificate into dir.
func (p *pki) addFrontProxy(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating front-proxy CA key: %w", err)
	}
	caTmpl := p.template("gputask-test-front-proxy-ca", nil)
	caTmpl.IsCA = true
	caTmpl.BasicConstraintsValid = true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return fmt.Errorf("signing front-proxy CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("parsing front-proxy CA certificate: %w", err)
	}
	client := p.template(FrontProxyClientName, nil)
	client.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	certPEM, keyPEM, err := p.sign(client, caCert, caKey)
	if err != nil {
		return fmt.Errorf("front-proxy client certificate: %w", err)
	}
	fp := &frontProxyPKI{
		CACert:     filepath.Join(dir, "front-proxy-ca.crt"),
		ClientCert: filepath.Join(dir, "front-proxy-client.crt"),
		ClientKey:  filepath.Join(dir, "front-proxy-client.key"),
	}
	if err := writePair(fp.CACert, pemBlock("CERTIFICATE", caDER), filepath.Join(dir, "front-proxy-ca.key"), mustKeyPEM(caKey)); err != nil {
		return err
	}
	if err := writePair(fp.ClientCert, certPEM, fp.ClientKey, keyPEM); err != nil {
		return err
	}
	p.frontProxy = fp
	return nil
}

func mustKeyPEM(key *ecdsa.PrivateKey) []byte {
	b, err := privateKeyPEM(key)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return b
}

// aggregationArgs are kube-apiserver's aggregation-layer flags, as kubeadm
// sets them. --enable-aggregator-routing sends proxied requests to the
// Service's endpoint rather than its cluster IP, which nothing routes here
// (no kube-proxy).
func (cp *ControlPlane) aggregationArgs() []string {
	fp := cp.pki.frontProxy
	if fp == nil {
		return nil
	}
	return []string{
		"--requestheader-client-ca-file=" + fp.CACert,
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=" + RequestHeaderUser,
		"--requestheader-group-headers=" + RequestHeaderGroup,
		"--requestheader-extra-headers-prefix=" + RequestHeaderExtraPrefix,
		"--proxy-client-cert-file=" + fp.ClientCert,
		"--proxy-client-key-file=" + fp.ClientKey,
		"--enable-aggregator-routing=true",
	}
}

// CACertPEM is the test CA, which signs every serving certificate of the
// control plane and those of IssueServingCert: a caBundle for an
// APIService or a webhook.
func (cp *ControlPlane) CACertPEM() []byte { return cp.pki.CACertPEM }

// IssueServingCert writes a serving certificate of the test CA for an
// extension API server or webhook reached at dnsNames and ips, and returns
// the paths of the certificate and its key.
func (cp *ControlPlane) IssueServingCert(name string, dnsNames []string, ips []net.IP) (certFile, keyFile string, err error) {
	tmpl := cp.pki.template(name, nil)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.DNSNames, tmpl.IPAddresses = dnsNames, ips
	certPEM, keyPEM, err := cp.pki.sign(tmpl, cp.pki.caCert, cp.pki.caKey)
	if err != nil {
		return "", "", fmt.Errorf("serving certificate for %s: %w", name, err)
	}
	certFile = filepath.Join(cp.Dir, name+".crt")
	keyFile = filepath.Join(cp.Dir, name+".key")
	if err := writePair(certFile, certPEM, keyFile, keyPEM); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// ServiceDNSNames are the names the API server verifies an extension
// server's certificate against when it proxies to Service ns/name.
func ServiceDNSNames(ns, name string) []string {
	return []string{name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local"}
}

var apiServiceResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// APIServiceName is the name of the APIService of group/version.
func APIServiceName(group, version string) string { return version + "." + group }

// RegisterAPIService makes the API server serve group/version from an
// extension API server listening at addr, through the aggregation layer
// (Options.AggregationLayer): a Service ns/name without a selector, an
// EndpointSlice that points it at addr, and the APIService, trusting the
// test CA (IssueServingCert). addr cannot be a loopback address, which the
// API server refuses in an EndpointSlice: it is an address of a bridge the
// test created (CreateBridgeT). It returns once the APIService is
// Available, which the API server decides by calling the server, and the
// API server proxies group/version's discovery to it.
func (cp *ControlPlane) RegisterAPIService(ctx context.Context, ns, name, group, version string, addr netip.AddrPort) error {
	if cp.pki.frontProxy == nil {
		return fmt.Errorf("registering %s/%s: the control plane runs without Options.AggregationLayer", group, version)
	}
	const portName = "https"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: portName, Port: 443, Protocol: corev1.ProtocolTCP,
		}}},
	}
	if _, err := cp.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service %s/%s: %w", ns, name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "gputask-test-framework"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{addr.Addr().String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(int32(addr.Port())), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := cp.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating endpointslice %s/%s: %w", ns, name, err)
	}
	client, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": APIServiceName(group, version)},
		"spec": map[string]any{
			"group":   group,
			"version": version,
			"service": map[string]any{"namespace": ns, "name": name, "port": int64(443)},
			// []byte in the API, so base64 in JSON.
			"caBundle":             base64.StdEncoding.EncodeToString(cp.pki.CACertPEM),
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
		},
	}}
	apiServices := client.Resource(apiServiceResource)
	if _, err := apiServices.Create(ctx, apiService, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating apiservice %s: %w", apiService.GetName(), err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, componentStartTimeout, true, func(ctx context.Context) (bool, error) {
		cur, err := apiServices.Get(ctx, apiService.GetName(), metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		for _, c := range conditions {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprintf("Available=%v %v: %v", m["status"], m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		last = "no Available condition yet"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("apiservice %s not Available: %w; last seen: %s", apiService.GetName(), err, last)
	}
	// Available is written by the API server's availability controller;
	// its proxy learns of the condition through another informer, and
	// answers 503 until it has. Its discovery of group/version, which the
	// server answers without reading any object, shows when it proxies.
	path := "/apis/" + group + "/" + version
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, componentStartTimeout, true, func(ctx context.Context) (bool, error) {
		if _, err := cp.Kube.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx); err != nil {
			last = err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("apiservice %s Available, but %s not served through the API server: %w; last seen: %s", apiService.GetName(), path, err, last)
	}
	return nil
}

// UnregisterAPIService deletes the APIService of group/version, so that the
// API server stops proxying to a server the test is about to stop.
func (cp *ControlPlane) UnregisterAPIService(ctx context.Context, group, version string) error {
	client, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	err = client.Resource(apiServiceResource).Delete(ctx, APIServiceName(group, version), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting apiservice %s: %w", APIServiceName(group, version), err)
	}
	return nil
}
