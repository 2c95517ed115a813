package loadindex

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// marker stands for data the set's author must not learn: the answer of a
// server that the source was pointed at.
const marker = "S3CR3T-D4T4"

// TestErrorsCarryTheClassOnly points sources at servers that put marker in
// every part of their answer that an error could repeat, and checks that
// each failure says its coarse class and nothing else: no status code, no
// byte offset, no count of series, never the marker. The precise cause is
// kept for the controller's log, which never repeats the marker either.
func TestErrorsCarryTheClassOnly(t *testing.T) {
	jsonWith := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Leak", marker)
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	series := `{"metric":{"k":"` + marker + `"},"value":[1,"1"]}`
	tests := []struct {
		name    string
		handler http.HandlerFunc
		prom    bool
		wantErr error
		class   ReadClass
		detail  string
	}{
		{name: "error body", handler: jsonWith(http.StatusForbidden, `{"message":"`+marker+`"}`), wantErr: ErrStatus, class: ClassHTTP4xx, detail: "unexpected HTTP status 403"},
		{name: "plain error body", handler: jsonWith(http.StatusInternalServerError, marker), wantErr: ErrStatus, class: ClassHTTP5xx, detail: "unexpected HTTP status 500"},
		{name: "not modified", handler: jsonWith(http.StatusNotModified, ""), wantErr: ErrStatus, class: ClassInvalidAnswer, detail: "304"},
		{name: "string value", handler: jsonWith(http.StatusOK, `{"data":{"load_balance":"`+marker+`"}}`), wantErr: ErrNotNumber, class: ClassNotANumber, detail: `at "data.load_balance": value is not a number`},
		{name: "object value", handler: jsonWith(http.StatusOK, `{"data":{"load_balance":{"k":"`+marker+`"}}}`), wantErr: ErrNotNumber, class: ClassNotANumber, detail: "got an object"},
		{name: "invalid JSON", handler: jsonWith(http.StatusOK, `{"data":`+marker+`}`), wantErr: ErrBadJSON, class: ClassInvalidAnswer, detail: "invalid JSON"},
		{name: "negative number", handler: jsonWith(http.StatusOK, `{"data":{"load_balance":-12345}}`), wantErr: ErrNegative, class: ClassInvalidAnswer, detail: "value is negative"},
		{name: "missing key", handler: jsonWith(http.StatusOK, `{"`+marker+`":1}`), wantErr: ErrMissingField, class: ClassInvalidAnswer, detail: "field not found"},
		{name: "body over cap", handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(strings.Repeat(marker, MaxBodyBytes/len(marker)+1)))
		}, wantErr: ErrBodyTooLarge, class: ClassInvalidAnswer, detail: "too large"},
		{name: "prometheus error text", prom: true, handler: jsonWith(http.StatusBadRequest, `{"status":"error","errorType":"bad_data","error":"`+marker+`"}`), wantErr: ErrQuery, class: ClassHTTP4xx, detail: "bad_data"},
		{name: "prometheus unavailable", prom: true, handler: jsonWith(http.StatusServiceUnavailable, `{"status":"error","errorType":"unavailable","error":"`+marker+`"}`), wantErr: ErrQuery, class: ClassHTTP5xx, detail: "unavailable"},
		{name: "prometheus unknown error type", prom: true, handler: jsonWith(http.StatusOK, `{"status":"error","errorType":"`+marker+`","error":"`+marker+`"}`), wantErr: ErrQuery, class: ClassInvalidAnswer, detail: "unknown error type"},
		{name: "prometheus result type", prom: true, handler: jsonWith(http.StatusOK, `{"status":"success","data":{"resultType":"`+marker+`","result":[]}}`), wantErr: ErrQuery, class: ClassInvalidAnswer, detail: "unknown result type"},
		{name: "prometheus no series", prom: true, handler: jsonWith(http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":[]}}`), wantErr: ErrQuery, class: ClassInvalidAnswer, detail: "no series"},
		{name: "prometheus several series", prom: true, handler: jsonWith(http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":[`+series+`,`+series+`]}}`), wantErr: ErrQuery, class: ClassInvalidAnswer, detail: "2 series"},
		{name: "prometheus sample", prom: true, handler: jsonWith(http.StatusOK, `{"status":"success","data":{"resultType":"scalar","result":[1,"`+marker+`"]}}`), wantErr: ErrNotNumber, class: ClassNotANumber, detail: "the sample value"},
		{name: "prometheus wrong shape", prom: true, handler: jsonWith(http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":{"`+marker+`":-5}}}`), wantErr: ErrBadJSON, class: ClassInvalidAnswer, detail: "invalid JSON"},
		{name: "redirect elsewhere", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://"+marker+".example/", http.StatusFound)
		}, wantErr: ErrRedirect, class: ClassRefusedByPolicy, detail: "redirect refused: to another host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, tt.handler)
			spec := httpMetric(srv.URL)
			if tt.prom {
				spec = promMetric(srv.URL)
			}
			_, err := mustNew(t, spec, nil).Read(context.Background())
			checkClassOnly(t, err, tt.wantErr, tt.class, tt.detail)
		})
	}
}

// TestTransportErrorsCarryTheClassOnly covers failures below HTTP: a server
// that answers garbage, one that hangs up, a certificate with the marker in
// its names, a port where nobody listens and a server that never answers.
// Refused, reset and timed out are one class to a tenant: telling them apart
// would let a set probe which ports of a network are open.
func TestTransportErrorsCarryTheClassOnly(t *testing.T) {
	rawServer := func(t *testing.T, answer string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				buf := make([]byte, 4096)
				_, _ = conn.Read(buf)
				_, _ = conn.Write([]byte(answer))
				_ = conn.Close()
			}
		}()
		return "http://" + ln.Addr().String()
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String()
	_ = closed.Close()

	tlsSrv := httptest.NewUnstartedServer(jsonBody(`{"data":{"load_balance":1}}`))
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	release := make(chan struct{})
	hanging := serve(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)

	tests := []struct {
		name    string
		url     string
		timeout time.Duration
		wantErr error
		class   ReadClass
		detail  string
	}{
		{name: "malformed answer", url: rawServer(t, marker+"\r\n\r\n"), wantErr: ErrTransport, class: ClassUnreachable, detail: "connection failed"},
		{name: "hang-up", url: rawServer(t, ""), wantErr: ErrConnectionReset, class: ClassUnreachable, detail: "connection closed by the server"},
		{name: "refused", url: closedURL, wantErr: ErrConnectionRefused, class: ClassUnreachable, detail: "connection refused"},
		{name: "timeout", url: hanging.URL, timeout: 50 * time.Millisecond, wantErr: ErrTimeout, class: ClassUnreachable, detail: "timed out"},
		{name: "TLS unknown authority", url: tlsSrv.URL, wantErr: ErrTLS, class: ClassTLS, detail: "TLS handshake failed"},
		{name: "plain HTTP to a TLS URL", url: strings.Replace(rawServer(t, "HTTP/1.1 200 OK\r\n\r\n"+marker), "http://", "https://", 1), wantErr: ErrTLS, class: ClassTLS, detail: "TLS handshake failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := httpMetric(tt.url)
			if tt.timeout > 0 {
				spec.HTTP.Timeout = &gputaskv1.Duration{Duration: tt.timeout}
			}
			_, err := mustNew(t, spec, nil).Read(context.Background())
			checkClassOnly(t, err, tt.wantErr, tt.class, tt.detail)
		})
	}
}

// checkClassOnly: the error's text is exactly its class's, its precise cause
// is there for the log, and neither repeats the server's answer.
func checkClassOnly(t *testing.T, err, wantErr error, class ReadClass, detail string) {
	t.Helper()
	if !errors.Is(err, wantErr) {
		t.Fatalf("Read error = %v (%s), want %v", err, Detail(err), wantErr)
	}
	if got := Class(err); got != string(class) {
		t.Errorf("Class = %s, want %s", got, class)
	}
	if err.Error() != classMessages[class] {
		t.Errorf("Read error %q, want exactly %q", err, classMessages[class])
	}
	if !strings.Contains(Detail(err), detail) {
		t.Errorf("Read error's detail %q does not say %q", Detail(err), detail)
	}
	for _, text := range []string{err.Error(), Detail(err)} {
		if strings.Contains(text, marker) || strings.Contains(text, "12345") {
			t.Errorf("Read error repeats the server's answer: %q", text)
		}
	}
}

// TestTenantTextHasNoDetail: no class message carries a digit or a word
// that tells one failure of its class from another.
func TestTenantTextHasNoDetail(t *testing.T) {
	for class, msg := range classMessages {
		for _, fine := range []string{"refused connection", "reset", "timed out", "timeout", "byte", "series", "DNS"} {
			if strings.Contains(msg, fine) {
				t.Errorf("class %s says %q, which tells failures of one class apart", class, fine)
			}
		}
		if strings.ContainsAny(strings.NewReplacer("4xx", "", "5xx", "").Replace(msg), "0123456789") {
			t.Errorf("class %s says a number: %q", class, msg)
		}
	}
}

func TestClass(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{asReadError(fmt.Errorf("GET http://x: %w", &StatusError{Code: 503})), "HTTP5xx"},
		{asReadError(fmt.Errorf("GET http://x: %w", &StatusError{Code: 404})), "HTTP4xx"},
		{asReadError(fmt.Errorf("GET http://x: %w after 5s", ErrTimeout)), "Unreachable"},
		{asReadError(fmt.Errorf("wrapped: %w", classified(ErrDNS, "host not found", errors.New("dns")))), "Unreachable"},
		{asReadError(fmt.Errorf("wrapped: %w", classified(ErrTLS, "certificate signed by an unknown authority", errors.New("x509")))), "TLS"},
		{asReadError(fmt.Errorf("wrapped: %w", classified(ErrDestinationRefused, "a loopback address", &destinationError{rule: "a loopback address"}))), "RefusedByPolicy"},
		{asReadError(fmt.Errorf("at %q: %w", "a", ErrNegative)), "InvalidAnswer"},
		{asReadError(fmt.Errorf("at %q: %w", "a", ErrNaN)), "NotANumber"},
		{asReadError(ErrBadJSON), "InvalidAnswer"},
		// Wrapping a read error again keeps its class.
		{fmt.Errorf("metric %q: %w", "m", asReadError(ErrBadJSON)), "InvalidAnswer"},
		{fmt.Errorf("http.auth: %w: secret ns/s", ErrSecretNotAllowed), "InvalidMetricSpec"},
		{errors.New("metric \"m\": http.url: must be set"), "InvalidMetricSpec"},
	} {
		if got := Class(tt.err); got != tt.want {
			t.Errorf("Class(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
