package loadindex

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// ErrDestinationRefused is a connection the destination policy did not allow.
var ErrDestinationRefused = errors.New("destination refused by the controller's policy")

// DestinationPolicy says which addresses load-index sources may connect to.
// A set's author picks the URL, and the controller connects from inside the
// cluster with its own network position, so without a policy a tenant could
// point a source at the API server, the controller's own endpoints, a
// node-local service or the cloud metadata service, and learn from the
// answer. The policy is checked on the resolved address of every
// connection, redirects included, so neither DNS names nor redirects get
// around it.
//
// The zero value refuses loopback, link-local, unspecified and multicast
// addresses, and allows every other one.
type DestinationPolicy struct {
	// Allowed, when not empty, is the only networks that may be reached. An
	// address in Allowed is permitted even when it is loopback or link-local,
	// but never when it is in Denied.
	Allowed []netip.Prefix
	// Denied are addresses refused whatever Allowed says: the API server's
	// own (its IP and port).
	Denied []netip.AddrPort
	// Local are the controller's own interface addresses, refused on every
	// port (its metrics and health endpoints listen there), except loopback
	// ones when AllowLoopback is set.
	Local []netip.Addr
	// AllowLoopback permits 127.0.0.0/8 and ::1, for tests and for a
	// sidecar that serves the load index next to the controller.
	AllowLoopback bool
}

// ParseCIDRs parses a list of CIDRs such as "10.0.0.0/8,fd00::/8"; a bare
// address stands for itself alone.
func ParseCIDRs(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		if !strings.Contains(raw, "/") {
			addr, err := netip.ParseAddr(raw)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an IP address: %w", raw, err)
			}
			out = append(out, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(raw)
		if err != nil {
			return nil, fmt.Errorf("invalid CIDR %q: %w", raw, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// destinationError is a connection the policy refused: which rule, and to
// what. It matches ErrDestinationRefused with errors.Is.
type destinationError struct {
	rule string
	addr netip.AddrPort
}

func (e *destinationError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrDestinationRefused, e.addr, e.rule)
}

func (e *destinationError) Is(target error) bool { return target == ErrDestinationRefused }

// Check returns nil when ap may be reached, and an error matching
// ErrDestinationRefused that says which rule refused it otherwise.
func (p *DestinationPolicy) Check(ap netip.AddrPort) error {
	refuse := func(rule string) error { return &destinationError{rule: rule, addr: ap} }
	addr := ap.Addr().Unmap()
	for _, d := range p.Denied {
		if d.Addr().Unmap() == addr && d.Port() == ap.Port() {
			return refuse("the API server")
		}
	}
	for _, l := range p.Local {
		if l.Unmap() == addr && !(addr.IsLoopback() && p.AllowLoopback) {
			return refuse("an address of the controller itself")
		}
	}
	if len(p.Allowed) > 0 {
		for _, prefix := range p.Allowed {
			if prefix.Contains(addr) {
				return nil
			}
		}
		return refuse("outside the allowed networks")
	}
	switch {
	case addr.IsLoopback():
		if p.AllowLoopback {
			return nil
		}
		return refuse("a loopback address")
	case addr.IsLinkLocalUnicast(), addr.IsLinkLocalMulticast():
		// 169.254.0.0/16 and fe80::/10 hold the cloud metadata services.
		return refuse("a link-local address")
	case addr.IsUnspecified():
		// Connecting to 0.0.0.0 or :: reaches the local host.
		return refuse("the unspecified address")
	case addr.IsMulticast(), addr.IsInterfaceLocalMulticast():
		return refuse("a multicast address")
	}
	return nil
}

// control is a net.Dialer Control function: it runs after name resolution,
// on the very address about to be connected, for every connection the
// transport makes.
func (p *DestinationPolicy) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &destinationError{rule: "an address that does not parse (" + network + ")"}
	}
	return p.Check(ap)
}

// dialer returns a net.Dialer that enforces the policy.
func (p *DestinationPolicy) dialer() *net.Dialer {
	// The same timeouts as http.DefaultTransport's dialer.
	d := &net.Dialer{Timeout: defaultDialTimeout, KeepAlive: defaultKeepAlive}
	if p != nil {
		d.Control = p.control
	}
	return d
}

// APIServerAddrs resolves the host and port of the API server's URL (as in a
// rest.Config's Host) to the addresses that the policy refuses.
func APIServerAddrs(host string, lookup func(string) ([]netip.Addr, error)) ([]netip.AddrPort, error) {
	u, err := parseEndpoint(host)
	if err != nil {
		// rest.Config.Host may lack a scheme: "127.0.0.1:6443".
		u, err = parseEndpoint("https://" + host)
		if err != nil {
			return nil, fmt.Errorf("API server address %q: %w", host, err)
		}
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	portNum, err := netip.ParseAddrPort("0.0.0.0:" + port)
	if err != nil {
		return nil, fmt.Errorf("API server port %q: %w", port, err)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = lookup(u.Hostname()); err != nil {
		return nil, fmt.Errorf("resolving API server host %q: %w", u.Hostname(), err)
	}
	out := make([]netip.AddrPort, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.AddrPortFrom(a.Unmap(), portNum.Port()))
	}
	return out, nil
}

// LocalAddrs returns the addresses of this host's network interfaces.
func LocalAddrs() ([]netip.Addr, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range ifAddrs {
		if prefix, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, prefix.Addr().Unmap())
		}
	}
	return out, nil
}

// PolicyOptions are the controller's flags for the destination policy.
type PolicyOptions struct {
	// AllowedCIDRs is --load-index-allowed-cidrs.
	AllowedCIDRs []string
	// AllowLoopback is --load-index-allow-loopback.
	AllowLoopback bool
	// APIServerHost is the API server's URL, as in rest.Config.Host.
	APIServerHost string
	// Kube, when set, is asked for the endpoints of the default/kubernetes
	// Service: the API servers' own addresses behind its cluster IP.
	Kube kubernetes.Interface
}

// NewDestinationPolicy builds the policy from the controller's flags, adding
// the API server's addresses and the controller's own to what is refused.
func NewDestinationPolicy(ctx context.Context, opts PolicyOptions) (*DestinationPolicy, error) {
	allowed, err := ParseCIDRs(opts.AllowedCIDRs)
	if err != nil {
		return nil, err
	}
	apiServer, err := APIServerAddrs(opts.APIServerHost, func(host string) ([]netip.Addr, error) {
		ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		return ips, err
	})
	if err != nil {
		return nil, err
	}
	if opts.Kube != nil {
		endpoints, err := APIServerEndpoints(ctx, opts.Kube)
		if err != nil {
			// Out of a cluster, or without the Role to read them: the
			// address the controller itself uses is refused all the same.
			klog.FromContext(ctx).Info("Could not read the API server's endpoints; refusing only its address from the kubeconfig", "err", err)
		}
		apiServer = append(apiServer, endpoints...)
	}
	local, err := LocalAddrs()
	if err != nil {
		return nil, err
	}
	return &DestinationPolicy{Allowed: allowed, Denied: apiServer, Local: local, AllowLoopback: opts.AllowLoopback}, nil
}

// APIServerEndpoints returns the addresses behind the default/kubernetes
// Service, where the API servers listen: the API server keeps them in the
// EndpointSlice default/kubernetes.
func APIServerEndpoints(ctx context.Context, kube kubernetes.Interface) ([]netip.AddrPort, error) {
	slice, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the EndpointSlice default/kubernetes: %w", err)
	}
	var out []netip.AddrPort
	{
		for _, port := range slice.Ports {
			if port.Port == nil {
				continue
			}
			for _, ep := range slice.Endpoints {
				for _, a := range ep.Addresses {
					if addr, err := netip.ParseAddr(a); err == nil {
						out = append(out, netip.AddrPortFrom(addr.Unmap(), uint16(*port.Port)))
					}
				}
			}
		}
	}
	return out, nil
}
