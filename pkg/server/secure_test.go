package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestDelegatedMetrics: /metrics answers only a caller whose token the API
// server knows and who may get /metrics; health stays on its own address.
func TestDelegatedMetrics(t *testing.T) {
	// The API server's review endpoints, as the delegating webhooks call them.
	users := map[string]string{"scraper-token": "system:serviceaccount:monitoring:prometheus", "tenant-token": "alice"}
	var mu sync.Mutex
	var reviewed []string
	tokenReviews := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var review authenticationv1.TokenReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			tokenReviews++
			mu.Unlock()
			if user, ok := users[review.Spec.Token]; ok {
				review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}}
			}
			_ = json.NewEncoder(w).Encode(review)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var review authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			reviewed = append(reviewed, review.Spec.User)
			mu.Unlock()
			attrs := review.Spec.NonResourceAttributes
			review.Status.Allowed = review.Spec.User == users["scraper-token"] && attrs != nil && attrs.Path == "/metrics" && attrs.Verb == "get"
			_ = json.NewEncoder(w).Encode(review)
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()
	// The fake API server speaks JSON only.
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := Delegated(MetricsHandler(true), kube)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, path string
		want              int
	}{
		{"anonymous", "", "/metrics", http.StatusUnauthorized},
		{"unknown token", "forged", "/metrics", http.StatusUnauthorized},
		{"a tenant", "tenant-token", "/metrics", http.StatusForbidden},
		{"the scraper", "scraper-token", "/metrics", http.StatusOK},
		{"the scraper, profiles", "scraper-token", "/debug/pprof/symbol", http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.name, tc.path, rec.Code, tc.want)
		}
	}
	mu.Lock()
	if len(reviewed) == 0 {
		t.Error("no SubjectAccessReview was made")
	}
	before, beforeSARs := tokenReviews, len(reviewed)
	mu.Unlock()

	// Within the cache's TTL a scraper costs no further review, allowed or
	// denied.
	for _, token := range []string{"scraper-token", "scraper-token", "tenant-token", "forged"} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	mu.Lock()
	defer mu.Unlock()
	if tokenReviews != before || len(reviewed) != beforeSARs {
		t.Errorf("repeated requests made %d TokenReviews and %d SubjectAccessReviews, want 0 and 0", tokenReviews-before, len(reviewed)-beforeSARs)
	}
}

func TestTLSConfig(t *testing.T) {
	if c, err := TLSConfig("", ""); err != nil || len(c.Certificates) != 1 {
		t.Errorf("self-signed: %v, %v", c, err)
	}
	if _, err := TLSConfig("cert.pem", ""); err == nil {
		t.Error("a certificate without a key must be refused")
	}
}
