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
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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

		// Cloud metadata and platform addresses outside link-local.
		{name: "AWS IPv6 metadata", addr: "[fd00:ec2::254]:80", want: "cloud metadata"},
		{name: "Alibaba metadata", addr: "100.100.100.200:80", want: "cloud metadata"},
		{name: "Azure WireServer", addr: "168.63.129.16:80", want: "cloud platform"},
		{name: "broadcast", addr: "255.255.255.255:80", want: "broadcast"},
		{name: "IPv6 unspecified", addr: "[::]:80", want: "unspecified"},
		{name: "IPv6 multicast", addr: "[ff02::1]:80", want: "multicast"},

		// Every spelling of a refused address is refused.
		{name: "IPv4-mapped metadata", addr: "[::ffff:169.254.169.254]:80", want: "link-local"},
		{name: "IPv4-mapped Alibaba metadata", addr: "[::ffff:100.100.100.200]:80", want: "cloud metadata"},
		{name: "IPv4-mapped WireServer", addr: "[::ffff:168.63.129.16]:80", want: "cloud platform"},
		{name: "NAT64 loopback", addr: "[64:ff9b::7f00:1]:8080", want: "loopback"},
		{name: "NAT64 metadata", addr: "[64:ff9b::a9fe:a9fe]:80", want: "link-local"},
		{name: "NAT64 Alibaba metadata", addr: "[64:ff9b::6464:64c8]:80", want: "cloud metadata"},
		{name: "NAT64 WireServer", addr: "[64:ff9b::a83f:8110]:80", want: "cloud platform"},
		{name: "NAT64 of a public address", addr: "[64:ff9b::cb00:7107]:80"},
		{name: "IPv4-compatible loopback", addr: "[::7f00:1]:8080", want: "loopback"},
		{name: "6to4 metadata", addr: "[2002:a9fe:a9fe::1]:80", want: "link-local"},
		{name: "zoned link-local", addr: "[fe80::1%eth0]:80", want: "link-local"},
		{name: "zoned loopback", addr: "[::1%lo]:80", want: "loopback"},
		{name: "zoned AWS metadata", addr: "[fd00:ec2::254%eth0]:80", want: "cloud metadata"},
		{name: "API server, IPv4-mapped", policy: DestinationPolicy{Denied: []netip.AddrPort{apiServer}}, addr: "[::ffff:10.96.0.1]:443", want: "API server"},
		{name: "API server, NAT64", policy: DestinationPolicy{Denied: []netip.AddrPort{apiServer}}, addr: "[64:ff9b::a60:1]:443", want: "API server"},
		{name: "API server from the EndpointSlice", policy: DestinationPolicy{apiServers: setOf("172.18.0.2:6443")}, addr: "[::ffff:172.18.0.2]:6443", want: "API server"},
		{name: "controller's own address, IPv4-mapped", policy: DestinationPolicy{Local: []netip.Addr{netip.MustParseAddr("10.1.2.3")}}, addr: "[::ffff:10.1.2.3]:9090", want: "controller itself"},
		{name: "controller's own IPv6 address, zoned", policy: DestinationPolicy{Local: []netip.Addr{netip.MustParseAddr("fd12::5")}}, addr: "[fd12::5%eth0]:9090", want: "controller itself"},

		// A broad allowed range never reopens what is always refused.
		{name: "0.0.0.0/0 keeps loopback refused", policy: allowing("0.0.0.0/0"), addr: "127.0.0.1:8080", want: "loopback"},
		{name: "0.0.0.0/0 keeps metadata refused", policy: allowing("0.0.0.0/0"), addr: "169.254.169.254:80", want: "link-local"},
		{name: "0.0.0.0/0 keeps Alibaba metadata refused", policy: allowing("0.0.0.0/0"), addr: "100.100.100.200:80", want: "cloud metadata"},
		{name: "0.0.0.0/0 keeps WireServer refused", policy: allowing("0.0.0.0/0"), addr: "168.63.129.16:80", want: "cloud platform"},
		{name: "0.0.0.0/0 keeps NAT64 metadata refused", policy: allowing("0.0.0.0/0", "::/0"), addr: "[64:ff9b::a9fe:a9fe]:80", want: "link-local"},
		{name: "::/0 keeps AWS metadata refused", policy: allowing("::/0"), addr: "[fd00:ec2::254]:80", want: "cloud metadata"},
		{name: "::/0 keeps IPv6 loopback refused", policy: allowing("::/0"), addr: "[::1]:80", want: "loopback"},
		{name: "fd00::/8 keeps AWS metadata refused", policy: allowing("fd00::/8"), addr: "[fd00:ec2::254]:80", want: "cloud metadata"},
		{name: "100.64.0.0/10 keeps Alibaba metadata refused", policy: allowing("100.64.0.0/10"), addr: "100.100.100.200:80", want: "cloud metadata"},
		{name: "100.64.0.0/10 allows the rest of it", policy: allowing("100.64.0.0/10"), addr: "100.100.100.201:80"},
		{name: "0.0.0.0/0 allows a public address", policy: allowing("0.0.0.0/0"), addr: "203.0.113.7:80"},
		{name: "::ffff:0:0/96 keeps loopback refused", policy: allowing("::ffff:0.0.0.0/96"), addr: "127.0.0.1:80", want: "loopback"},

		// A literal listing reopens exactly what it lists.
		{name: "literal 127.0.0.1/32", policy: allowing("127.0.0.1/32"), addr: "127.0.0.1:8080"},
		{name: "literal 127.0.0.1 keeps 127.0.0.2 refused", policy: allowing("127.0.0.1"), addr: "127.0.0.2:8080", want: "loopback"},
		{name: "literal 127.0.0.1/32, own loopback address", policy: DestinationPolicy{Allowed: mustCIDRs("127.0.0.1/32"), Local: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, addr: "127.0.0.1:8080"},
		{name: "literal Alibaba metadata", policy: allowing("100.100.100.200/32"), addr: "100.100.100.200:80"},
		{name: "literal mapped loopback", policy: allowing("::ffff:127.0.0.1/128"), addr: "127.0.0.1:80"},
		{name: "allow-loopback with allowed CIDRs", policy: DestinationPolicy{Allowed: mustCIDRs("10.0.0.0/8"), AllowLoopback: true}, addr: "127.0.0.1:8080"},
		{name: "allow-loopback keeps NAT64 metadata refused", policy: DestinationPolicy{AllowLoopback: true}, addr: "[64:ff9b::a9fe:a9fe]:80", want: "link-local"},
		{name: "literal listing never reopens the API server", policy: DestinationPolicy{Allowed: mustCIDRs("10.96.0.1/32"), Denied: []netip.AddrPort{apiServer}}, addr: "10.96.0.1:443", want: "API server"},
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

func mustCIDRs(list ...string) []netip.Prefix {
	out, err := ParseCIDRs(list)
	if err != nil {
		panic(err)
	}
	return out
}

func allowing(list ...string) DestinationPolicy {
	return DestinationPolicy{Allowed: mustCIDRs(list...)}
}

func setOf(addrs ...string) *addrPortSet {
	s := &addrPortSet{}
	for _, a := range addrs {
		s.add([]netip.AddrPort{netip.MustParseAddrPort(a)})
	}
	return s
}

func TestParseCIDRs(t *testing.T) {
	got, err := ParseCIDRs([]string{"10.0.0.0/8", " 192.168.1.7 ", "", "fd00::/8", "10.1.2.3/8", "::ffff:127.0.0.1/128", "::ffff:10.0.0.0/104", "::ffff:127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.168.1.7/32", "fd00::/8", "10.0.0.0/8", "127.0.0.1/32", "10.0.0.0/8", "127.0.0.1/32"}
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
	if _, err := src.Read(context.Background()); !errors.Is(err, ErrDestinationRefused) || !strings.Contains(Detail(err), "the API server") {
		t.Errorf("Read of the API server's address = %v (%s), want it refused", err, Detail(err))
	} else if Class(err) != string(ClassRefusedByPolicy) || strings.Contains(err.Error(), "API server") {
		t.Errorf("Read of the API server's address = %q, want the class only", err)
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

// TestAPIServerEndpointsKeptCurrent: an API server address added to the
// EndpointSlice default/kubernetes after the policy was built is refused too.
func TestAPIServerEndpointsKeptCurrent(t *testing.T) {
	port := int32(6443)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubernetes"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"172.18.0.2"}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
	}
	client := kubefake.NewClientset(slice)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	policy, err := NewDestinationPolicy(ctx, PolicyOptions{APIServerHost: "https://10.96.0.1:443", Kube: client})
	if err != nil {
		t.Fatal(err)
	}
	for _, refused := range []string{"10.96.0.1:443", "172.18.0.2:6443", "[::ffff:172.18.0.2]:6443"} {
		if err := policy.Check(netip.MustParseAddrPort(refused)); !errors.Is(err, ErrDestinationRefused) {
			t.Errorf("Check(%s) = %v, want refused as the API server", refused, err)
		}
	}
	added := netip.MustParseAddrPort("172.18.0.3:6443")
	if err := policy.Check(added); err != nil {
		t.Fatalf("Check(%s) before it is an API server = %v", added, err)
	}
	slice = slice.DeepCopy()
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"172.18.0.3"}})
	if _, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return policy.Check(added) != nil, nil
	})
	if err != nil {
		t.Fatalf("Check(%s) after the EndpointSlice named it = %v, want refused", added, policy.Check(added))
	}
	if err := policy.Check(added); !strings.Contains(err.Error(), "the API server") {
		t.Errorf("Check(%s) = %v, want refused as the API server", added, err)
	}
}

// TestNoEndpointSliceAccess: without the right to read the EndpointSlice,
// the policy still refuses the API server's address from the kubeconfig.
func TestNoEndpointSliceAccess(t *testing.T) {
	policy, err := NewDestinationPolicy(context.Background(), PolicyOptions{APIServerHost: "https://10.96.0.1:443", Kube: kubefake.NewClientset()})
	if err != nil {
		t.Fatal(err)
	}
	if err := policy.Check(netip.MustParseAddrPort("10.96.0.1:443")); !errors.Is(err, ErrDestinationRefused) {
		t.Errorf("Check = %v, want the API server refused", err)
	}
}
