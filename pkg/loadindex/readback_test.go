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
)

// marker stands for data the set's author must not learn: the answer of a
// server that the source was pointed at.
const marker = "S3CR3T-D4T4"

// TestErrorsCarryTheClassOnly points sources at servers that put marker in
// every part of their answer that an error could repeat, and checks that
// each failure names its class and never the marker.
func TestErrorsCarryTheClassOnly(t *testing.T) {
	jsonWith := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Leak", marker)
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	tests := []struct {
		name     string
		handler  http.HandlerFunc
		prom     bool
		location string
		wantErr  error
		wantMsg  string
	}{
		{name: "error body", handler: jsonWith(http.StatusForbidden, `{"message":"`+marker+`"}`), wantErr: ErrStatus, wantMsg: "unexpected HTTP status 403"},
		{name: "plain error body", handler: jsonWith(http.StatusInternalServerError, marker), wantErr: ErrStatus, wantMsg: "unexpected HTTP status 500"},
		{name: "string value", handler: jsonWith(http.StatusOK, `{"data":{"load_balance":"`+marker+`"}}`), wantErr: ErrNotNumber, wantMsg: `at "data.load_balance": value is not a number`},
		{name: "object value", handler: jsonWith(http.StatusOK, `{"data":{"load_balance":{"k":"`+marker+`"}}}`), wantErr: ErrNotNumber, wantMsg: "got an object"},
		{name: "invalid JSON", handler: jsonWith(http.StatusOK, `{"data":`+marker+`}`), wantErr: ErrBadJSON, wantMsg: "invalid JSON"},
		{name: "negative number", handler: jsonWith(http.StatusOK, `{"data":{"load_balance":-12345}}`), wantErr: ErrNegative, wantMsg: "value is negative"},
		{name: "missing key", handler: jsonWith(http.StatusOK, `{"`+marker+`":1}`), wantErr: ErrMissingField, wantMsg: "field not found"},
		{name: "prometheus error text", prom: true, handler: jsonWith(http.StatusBadRequest, `{"status":"error","errorType":"bad_data","error":"`+marker+`"}`), wantErr: ErrQuery, wantMsg: "(HTTP 400): bad_data"},
		{name: "prometheus unknown error type", prom: true, handler: jsonWith(http.StatusOK, `{"status":"error","errorType":"`+marker+`","error":"`+marker+`"}`), wantErr: ErrQuery, wantMsg: "unknown error type"},
		{name: "prometheus result type", prom: true, handler: jsonWith(http.StatusOK, `{"status":"success","data":{"resultType":"`+marker+`","result":[]}}`), wantErr: ErrQuery, wantMsg: "unknown result type"},
		{name: "prometheus sample", prom: true, handler: jsonWith(http.StatusOK, `{"status":"success","data":{"resultType":"scalar","result":[1,"`+marker+`"]}}`), wantErr: ErrNotNumber, wantMsg: "the sample value"},
		{name: "prometheus wrong shape", prom: true, handler: jsonWith(http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":{"`+marker+`":-5}}}`), wantErr: ErrBadJSON, wantMsg: "invalid JSON"},
		{name: "redirect elsewhere", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://"+marker+".example/", http.StatusFound)
		}, wantErr: ErrRedirect, wantMsg: "redirect refused: to another host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, tt.handler)
			spec := httpMetric(srv.URL)
			if tt.prom {
				spec = promMetric(srv.URL)
			}
			_, err := mustNew(t, spec, nil).Read(context.Background())
			checkClassOnly(t, err, tt.wantErr, tt.wantMsg)
		})
	}
}

// TestTransportErrorsCarryTheClassOnly covers failures below HTTP: a server
// that answers garbage, one that hangs up, a certificate with the marker in
// its names, and a port where nobody listens.
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

	tests := []struct {
		name    string
		url     string
		wantErr error
		wantMsg string
	}{
		{name: "malformed answer", url: rawServer(t, marker+"\r\n\r\n"), wantErr: ErrTransport, wantMsg: "connection failed"},
		{name: "hang-up", url: rawServer(t, ""), wantErr: ErrConnectionReset, wantMsg: "connection closed by the server"},
		{name: "refused", url: closedURL, wantErr: ErrConnectionRefused, wantMsg: "connection refused"},
		{name: "TLS unknown authority", url: tlsSrv.URL, wantErr: ErrTLS, wantMsg: "TLS handshake failed"},
		{name: "plain HTTP to a TLS URL", url: strings.Replace(rawServer(t, "HTTP/1.1 200 OK\r\n\r\n"+marker), "http://", "https://", 1), wantErr: ErrTLS, wantMsg: "TLS handshake failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mustNew(t, httpMetric(tt.url), nil).Read(context.Background())
			checkClassOnly(t, err, tt.wantErr, tt.wantMsg)
		})
	}
}

func checkClassOnly(t *testing.T, err, wantErr error, wantMsg string) {
	t.Helper()
	if !errors.Is(err, wantErr) {
		t.Fatalf("Read error = %v, want %v", err, wantErr)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("Read error %q does not say %q", err, wantMsg)
	}
	if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), "12345") {
		t.Errorf("Read error repeats the server's answer: %q", err)
	}
}

func TestClass(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("GET http://x: %w", &StatusError{Code: 503}), "HTTPStatus"},
		{fmt.Errorf("GET http://x: %w after 5s", ErrTimeout), "Timeout"},
		{fmt.Errorf("wrapped: %w", classified(ErrTLS, "certificate signed by an unknown authority", errors.New("x509"))), "TLS"},
		{fmt.Errorf("wrapped: %w", classified(ErrDestinationRefused, "a loopback address", &destinationError{rule: "a loopback address"})), "DestinationRefused"},
		{fmt.Errorf("at %q: %w", "a", ErrNegative), "InvalidValue"},
		{fmt.Errorf("http.auth: %w: secret ns/s", ErrSecretNotAllowed), "SecretNotAllowed"},
		{ErrBadJSON, "InvalidJSON"},
		{errors.New("metric \"m\": http.url: must be set"), "Other"},
	} {
		if got := Class(tt.err); got != tt.want {
			t.Errorf("Class(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
