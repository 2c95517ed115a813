package loadindex

import "testing"

func TestCheckHeaderName(t *testing.T) {
	for _, tt := range []struct {
		name       string
		fromSecret bool
		ok         bool
	}{
		{"X-Api-Key", false, true},
		{"Accept-Language", false, true},
		{"Authorization", true, true},
		{"authorization", false, false},
		{"AUTHORIZATION", false, false},
		{"X-Forwarded-For", false, false},
		{"x-forwarded-proto", true, false},
		{"Forwarded", false, false},
		{"X-Real-IP", false, false},
		{"x-real-ip", false, false},
		{"X-Remote-User", false, false},
		{"X-REMOTE-GROUP", true, false},
		{"Impersonate-User", false, false},
		{"impersonate-extra-scopes", false, false},
		{"Host", false, false},
		{"Connection", false, false},
		{"Proxy-Authorization", true, false},
		{"Proxy-Connection", false, false},
		{"Te", false, false},
		{"TE", false, false},
		{"Trailer", false, false},
		{"Transfer-Encoding", false, false},
		{"Upgrade", false, false},
		{"Keep-Alive", false, false},
		// Prefixes match whole words only.
		{"X-Forwarded", false, true},
		{"Proxy", false, true},
		{"Hostname", false, true},
	} {
		err := checkHeaderName(tt.name, tt.fromSecret)
		if (err == nil) != tt.ok {
			t.Errorf("checkHeaderName(%q, fromSecret=%v) = %v, want ok=%v", tt.name, tt.fromSecret, err, tt.ok)
		}
	}
}
