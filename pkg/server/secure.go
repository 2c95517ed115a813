package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// reviewCacheTTL is how long a TokenReview or SubjectAccessReview answer is
// kept, so a scraper every few seconds costs the API server one review of
// each kind per TTL.
const reviewCacheTTL = 10 * time.Second

// reviewCacheSize bounds each cache of answers: callers of /metrics are a
// handful of scrapers.
const reviewCacheSize = 1024

// reviewTimeout bounds one review call.
const reviewTimeout = 10 * time.Second

// Delegated wraps h so that every request is authenticated with a
// TokenReview and authorized with a SubjectAccessReview on the API server,
// as kube-controller-manager's secure port and controller-runtime's metrics
// filter do: a scraper needs a ServiceAccount (or user) that may get the
// non-resource URL it reads, such as /metrics. Anonymous requests are
// refused. Answers are kept for reviewCacheTTL, allowed and denied alike.
//
// It calls the review APIs through client-go rather than through
// k8s.io/apiserver's delegating authenticator and authorizer: those link
// most of an API server (gRPC, OpenTelemetry, CEL) into the binary, about
// half its size, which every replica pays in memory.
func Delegated(h http.Handler, kube kubernetes.Interface) (http.Handler, error) {
	return &delegated{
		next:    h,
		kube:    kube,
		users:   utilcache.NewLRUExpireCache(reviewCacheSize),
		allowed: utilcache.NewLRUExpireCache(reviewCacheSize),
	}, nil
}

type delegated struct {
	next           http.Handler
	kube           kubernetes.Interface
	users, allowed *utilcache.LRUExpireCache
}

func (d *delegated) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := bearerToken(r)
	if !ok {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	user, err := d.authenticate(r.Context(), token)
	if err != nil {
		klog.FromContext(r.Context()).V(2).Info("TokenReview failed", "err", err)
	}
	if user == nil {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	// A non-resource URL's verb is the request's method, lower-cased, as
	// the API server's RequestInfo makes it.
	attrs := authorizationv1.NonResourceAttributes{Path: r.URL.Path, Verb: strings.ToLower(r.Method)}
	allowed, err := d.authorize(r.Context(), user, attrs)
	if err != nil {
		klog.FromContext(r.Context()).V(2).Info("SubjectAccessReview failed", "err", err)
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	if !allowed {
		http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", user.Username, attrs.Verb, attrs.Path), http.StatusForbidden)
		return
	}
	d.next.ServeHTTP(w, r)
}

// bearerToken is the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "bearer") && token != ""
}

// authenticate returns the user the token belongs to, nil if the API server
// does not know it. The cache is keyed by the token's hash, not the token.
func (d *delegated) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if v, ok := d.users.Get(key); ok {
		return v.(*authenticationv1.UserInfo), nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := d.kube.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	var user *authenticationv1.UserInfo
	if review.Status.Authenticated {
		user = &review.Status.User
	}
	d.users.Add(key, user, reviewCacheTTL)
	return user, nil
}

// authorize asks whether user may do attrs.
func (d *delegated) authorize(ctx context.Context, user *authenticationv1.UserInfo, attrs authorizationv1.NonResourceAttributes) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
		NonResourceAttributes: &attrs,
	}
	keyBytes, err := json.Marshal(spec)
	if err != nil {
		return false, err
	}
	key := string(keyBytes)
	if v, ok := d.allowed.Get(key); ok {
		return v.(bool), nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := d.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx,
		&authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	d.allowed.Add(key, review.Status.Allowed, reviewCacheTTL)
	return review.Status.Allowed, nil
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
