package framework

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of the files that secure the control plane, all made
// fresh for each control plane: one CA signs the serving certificate of every
// component and the admin's client certificate.
type pki struct {
	CACert        string
	CACertPEM     []byte
	ServingCert   string
	ServingKey    string
	AdminCertPEM  []byte
	AdminKeyPEM   []byte
	SAPublicKey   string
	SAPrivateKey  string
	certValidTime time.Duration

	// caCert and caKey sign the certificates made after start-up: those of
	// extension servers that the API server calls (IssueServingCert) and a
	// real node's.
	caCert *x509.Certificate
	caKey  crypto.Signer
	// frontProxy is set with Options.AggregationLayer.
	frontProxy *frontProxyPKI
}

// servingIPs and servingNames are what components are reached by: the
// loopback address, and the in-cluster names and service IP of the apiserver
// so that clients that assume them also verify.
var (
	servingIPs   = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)}
	servingNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
)

// newPKI writes a CA, a serving certificate for 127.0.0.1/localhost, an admin
// client certificate in system:masters, and a service-account signing key
// into dir. ECDSA P-256 keeps generation fast.
func newPKI(dir string) (*pki, error) {
	p := &pki{certValidTime: 7 * 24 * time.Hour}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	caTmpl := p.template("gputask-test-ca", nil)
	caTmpl.IsCA = true
	caTmpl.BasicConstraintsValid = true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	p.caCert, p.caKey = caCert, caKey
	p.CACertPEM = pemBlock("CERTIFICATE", caDER)
	p.CACert = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(p.CACert, p.CACertPEM, 0o644); err != nil {
		return nil, fmt.Errorf("writing CA certificate: %w", err)
	}

	serving := p.template("kube-apiserver", nil)
	serving.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	serving.IPAddresses = servingIPs
	serving.DNSNames = servingNames
	certPEM, keyPEM, err := p.sign(serving, caCert, caKey)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	p.ServingCert = filepath.Join(dir, "serving.crt")
	p.ServingKey = filepath.Join(dir, "serving.key")
	if err := writePair(p.ServingCert, certPEM, p.ServingKey, keyPEM); err != nil {
		return nil, err
	}

	admin := p.template("gputask-admin", []string{"system:masters"})
	admin.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if p.AdminCertPEM, p.AdminKeyPEM, err = p.sign(admin, caCert, caKey); err != nil {
		return nil, fmt.Errorf("admin client certificate: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating service-account key: %w", err)
	}
	saKeyPEM, err := privateKeyPEM(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("encoding service-account public key: %w", err)
	}
	p.SAPrivateKey = filepath.Join(dir, "sa.key")
	p.SAPublicKey = filepath.Join(dir, "sa.pub")
	if err := writePair(p.SAPublicKey, pemBlock("PUBLIC KEY", saPubDER), p.SAPrivateKey, saKeyPEM); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) template(commonName string, organizations []string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: organizations},
		// Backdated a little so that a clock a second behind does not reject it.
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(p.certValidTime),
		KeyUsage:  x509.KeyUsageDigitalSignature,
	}
}

// sign makes a fresh key for tmpl and signs it with the CA.
func (p *pki) sign(tmpl, ca *x509.Certificate, caKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	keyPEM, err = privateKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), keyPEM, nil
}

// clientCertificate signs a client certificate for commonName in
// organizations, such as a kubelet's system:node:<name> in system:nodes.
func (p *pki) clientCertificate(commonName string, organizations ...string) (certPEM, keyPEM []byte, err error) {
	tmpl := p.template(commonName, organizations)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return p.sign(tmpl, p.caCert, p.caKey)
}

func privateKeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func writePair(certPath string, certPEM []byte, keyPath string, keyPEM []byte) error {
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", certPath, err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", keyPath, err)
	}
	return nil
}
