package loadindex

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

func TestDestinationPolicy(t *testing.T) {
	apiServer := netip.MustParseAddrPort("10.96.0.1:443")
	tests := []struct {
		name   string
		policy DestinationPolicy
		addr   string
		want   string // the rule that refuses, or "" for allowed
	}{
		{name: "public", addr: "203.0.113.7:80"},
		{name: "cluster network", addr: "10.0.3.4:9090"},
		{name: "IPv4 loopback", addr: "127.0.0.1:8080", want: "loopback"},
		{name: "other loopback", addr: "127.1.2.3:8080", want: "loopback"},
		{name: "IPv6 loopback", addr: "[::1]:8080", want: "loopback"},
		{name: "IPv4-mapped loopback", addr: "[::ffff:127.0.0.1]:8080", want: "loopback"},
		{name: "cloud metadata", addr: "169.254.169.254:80", want: "link-local"},
		{name: "IPv6 link-local", addr: "[fe80::1]:80", want: "link-local"},
		{name: "unspecified", addr: "0.0.0.0:8080", want: "unspecified"},
		{name: "multicast", addr: "239.1.1.1:80", want: "multicast"},
		{name: "API server", policy: DestinationPolicy{Denied: []netip.AddrPort{apiServer}}, addr: "10.96.0.1:443", want: "API server"},
		{name: "API server's IP on another port", policy: DestinationPolicy{Denied: []netip.AddrPort{apiServer}}, addr: "10.96.0.1:8443"},
		{name: "controller's own address", policy: DestinationPolicy{Local: []netip.Addr{netip.MustParseAddr("10.1.2.3")}}, addr: "10.1.2.3:8080", want: "controller itself"},
		{name: "loopback allowed", policy: DestinationPolicy{AllowLoopback: true}, addr: "127.0.0.1:8080"},
		{name: "loopback allowed, own loopback address", policy: DestinationPolicy{AllowLoopback: true, Local: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, addr: "127.0.0.1:8080"},
		{name: "loopback allowed, metadata still refused", policy: DestinationPolicy{AllowLoopback: true}, addr: "169.254.169.254:80", want: "link-local"},
		{name: "loopback allowed, API server still refused", policy: DestinationPolicy{AllowLoopback: true, Denied: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:6443")}}, addr: "127.0.0.1:6443", want: "API server"},
		{name: "inside allowed CIDRs", policy: DestinationPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, addr: "10.9.9.9:80"},
		{name: "outside allowed CIDRs", policy: DestinationPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, addr: "192.168.1.1:80", want: "outside the allowed networks"},
		{name: "allowed CIDR lifts link-local", policy: DestinationPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("169.254.10.0/24")}}, addr: "169.254.10.5:80"},
		{name: "allowed CIDR never lifts the API server", policy: DestinationPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Denied: []netip.AddrPort{apiServer}}, addr: "10.96.0.1:443", want: "API server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Check(netip.MustParseAddrPort(tt.addr))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed", tt.addr, err)
				}
				return
			}
			if !errors.Is(err, ErrDestinationRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check(%s) = %v, want refused as %q", tt.addr, err, tt.want)
			}
		})
	}
}

func TestParseCIDRs(t *testing.T) {
	got, err := ParseCIDRs([]string{"10.0.0.0/8", " 192.168.1.7 ", "", "fd00::/8", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.168.1.7/32", "fd00::/8", "10.0.0.0/8"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "nope", "10.0.0/8"} {
		if _, err := ParseCIDRs([]string{bad}); err == nil {
			t.Errorf("ParseCIDRs(%q) succeeded", bad)
		}
	}
}

func TestAPIServerAddrs(t *testing.T) {
	lookup := func(host string) ([]netip.Addr, error) {
		if host == "kubernetes.default.svc" {
			return []netip.Addr{netip.MustParseAddr("10.96.0.1")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	for host, want := range map[string]string{
		"https://127.0.0.1:6443":         "127.0.0.1:6443",
		"https://10.96.0.1":              "10.96.0.1:443",
		"http://10.96.0.1":               "10.96.0.1:80",
		"10.96.0.1:6443":                 "10.96.0.1:6443",
		"https://kubernetes.default.svc": "10.96.0.1:443",
		"https://[::1]:6443":             "[::1]:6443",
	} {
		got, err := APIServerAddrs(host, lookup)
		if err != nil || len(got) != 1 || got[0].String() != want {
			t.Errorf("APIServerAddrs(%q) = %v, %v; want %s", host, got, err, want)
		}
	}
	if _, err := APIServerAddrs("https://unknown.example", lookup); err == nil {
		t.Error("an unresolvable API server host was accepted")
	}
}

// TestPolicyAppliesToTheResolvedAddress shows that a name resolving to a
// refused address is refused at dial time, and that nothing is sent: the
// check runs before the connection is made.
func TestPolicyAppliesToTheResolvedAddress(t *testing.T) {
	var requests atomic.Int32
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		jsonBody(`{"data":{"load_balance":1}}`)(w, r)
	})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	for _, u := range []string{srv.URL, "http://localhost:" + port} {
		src, err := New(context.Background(), httpMetric(u), "ns", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.Read(context.Background())
		if !errors.Is(err, ErrDestinationRefused) {
			t.Errorf("Read %s with the default policy = %v, want ErrDestinationRefused", u, err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the server got %d requests, want 0", n)
	}
	// The API server's address is refused even when loopback is allowed.
	ap := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	f := Factory{Destinations: &DestinationPolicy{AllowLoopback: true, Denied: []netip.AddrPort{ap}}}
	src, err := f.New(context.Background(), httpMetric(srv.URL), "ns")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Read(context.Background()); !errors.Is(err, ErrDestinationRefused) || !strings.Contains(err.Error(), "the API server") {
		t.Errorf("Read of the API server's address = %v, want it refused", err)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the server got %d requests, want 0", n)
	}
}

func TestAPIServerEndpoints(t *testing.T) {
	port := int32(6443)
	client := kubefake.NewClientset(&discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubernetes"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"172.18.0.2"}}, {Addresses: []string{"172.18.0.3"}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
	})
	got, err := APIServerEndpoints(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].String() != "172.18.0.2:6443" || got[1].String() != "172.18.0.3:6443" {
		t.Errorf("APIServerEndpoints = %v", got)
	}
	if _, err := APIServerEndpoints(context.Background(), kubefake.NewClientset()); err == nil {
		t.Error("no error without the EndpointSlice")
	}
}
