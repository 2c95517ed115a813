package server

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	apiserveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	certutil "k8s.io/client-go/util/cert"
)

// reviewCacheTTL is how long a TokenReview or SubjectAccessReview answer is
// kept, so a scraper every few seconds costs the API server one review of
// each kind per TTL.
const reviewCacheTTL = 10 * time.Second

// Delegated wraps h so that every request is authenticated with a
// TokenReview and authorized with a SubjectAccessReview on the API server,
// as kube-controller-manager's secure port and controller-runtime's metrics
// filter do: a scraper needs a ServiceAccount (or user) that may get the
// non-resource URL it reads, such as /metrics. Anonymous requests are
// refused.
func Delegated(h http.Handler, kube kubernetes.Interface) (http.Handler, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      apiserveroptions.DefaultAuthWebhookRetryBackoff(),
		CacheTTL:                 reviewCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the delegated authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             reviewCacheTTL,
		DenyCacheTTL:              reviewCacheTTL,
		WebhookRetryBackoff:       apiserveroptions.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the delegated authorizer: %w", err)
	}
	resolver := &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	handler := genericapifilters.WithAuthorization(h, authz, scheme.Codecs)
	handler = genericapifilters.WithAuthentication(handler, authn, genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	return genericapifilters.WithRequestInfo(handler, resolver), nil
}

// TLSConfig serves the certificate in certFile and keyFile, or, when both
// are empty, a self-signed one made at start, as kube-controller-manager
// does without --tls-cert-file. Scrapers then skip verification or trust
// the mounted certificate's CA.
func TLSConfig(certFile, keyFile string) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	switch {
	case certFile == "" && keyFile == "":
		var certPEM, keyPEM []byte
		certPEM, keyPEM, err = certutil.GenerateSelfSignedCertKey("gputask-controller", nil, []string{"localhost"})
		if err == nil {
			cert, err = tls.X509KeyPair(certPEM, keyPEM)
		}
	case certFile == "" || keyFile == "":
		return nil, fmt.Errorf("a serving certificate needs both a certificate file and a key file")
	default:
		cert, err = tls.LoadX509KeyPair(certFile, keyFile)
	}
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
