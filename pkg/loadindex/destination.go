package loadindex

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
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
// around it, and on every spelling of that address: an IPv4-mapped or
// IPv4-compatible IPv6 address, a NAT64 (64:ff9b::/96) or 6to4 address
// embedding an IPv4 one, and an IPv6 address with a zone are checked as the
// addresses they reach.
//
// Some addresses are always refused (see alwaysRefused): loopback,
// link-local, the cloud metadata and platform addresses, unspecified and
// multicast. Allowed reopens one of them only when it lists it literally,
// within the refused range: 127.0.0.1/32 reopens 127.0.0.1, and 0.0.0.0/0
// or 100.64.0.0/10 reopen nothing. The API server (its IP and port) and the
// controller's own addresses are never reopened, but for the controller's
// loopback addresses when loopback is allowed.
type DestinationPolicy struct {
	// Allowed, when not empty, is the only networks that may be reached.
	Allowed []netip.Prefix
	// Denied are addresses refused whatever Allowed says: the API server's
	// own (its IP and port).
	Denied []netip.AddrPort
	// Local are the controller's own interface addresses, refused on every
	// port (its metrics and health endpoints listen there), except loopback
	// ones when loopback is allowed.
	Local []netip.Addr
	// AllowLoopback permits 127.0.0.0/8 and ::1, for tests and for a
	// sidecar that serves the load index next to the controller.
	AllowLoopback bool

	// apiServers are the API servers' addresses from the EndpointSlice
	// default/kubernetes, kept current while the controller runs; nil when
	// nobody watches it.
	apiServers *addrPortSet
}

// refusedRange is a range of addresses refused unless reopened literally.
type refusedRange struct {
	prefix netip.Prefix
	rule   string
}

// alwaysRefused are the ranges no source may reach by default.
var alwaysRefused = []refusedRange{
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	// 169.254.0.0/16 and fe80::/10 hold the cloud metadata services of
	// most clouds (169.254.169.254).
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	// AWS's IPv6 instance metadata service.
	{netip.MustParsePrefix("fd00:ec2::/32"), "a cloud metadata address"},
	// Alibaba Cloud's metadata service.
	{netip.MustParsePrefix("100.100.100.200/32"), "a cloud metadata address"},
	// Azure's WireServer: the VM agent's channel to the platform.
	{netip.MustParsePrefix("168.63.129.16/32"), "a cloud platform address"},
	// Connecting to 0.0.0.0 or :: reaches the local host.
	{netip.MustParsePrefix("0.0.0.0/32"), "the unspecified address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
}

// IPv6 ranges that embed an IPv4 address in their last 32 bits, or (6to4)
// in bits 16 to 47; a connection there reaches, or is translated to, that
// IPv4 address.
var (
	nat64Prefix        = netip.MustParsePrefix("64:ff9b::/96")
	ipv4CompatiblePref = netip.MustParsePrefix("::/96")
	sixToFourPrefix    = netip.MustParsePrefix("2002::/16")
)

// spellings returns addr without its zone and IPv4 mapping, and the IPv4
// address it embeds, if any: every address a connection to addr may reach.
func spellings(addr netip.Addr) []netip.Addr {
	a := addr.WithZone("").Unmap()
	out := []netip.Addr{a}
	if !a.Is6() {
		return out
	}
	b := a.As16()
	switch {
	case nat64Prefix.Contains(a):
		out = append(out, netip.AddrFrom4([4]byte(b[12:16])))
	case ipv4CompatiblePref.Contains(a) && !a.IsUnspecified() && !a.IsLoopback():
		out = append(out, netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFourPrefix.Contains(a):
		out = append(out, netip.AddrFrom4([4]byte(b[2:6])))
	}
	return out
}

// ParseCIDRs parses a list of CIDRs such as "10.0.0.0/8,fd00::/8"; a bare
// address stands for itself alone. IPv4-mapped IPv6 prefixes are read as
// the IPv4 prefixes they are.
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
			addr = addr.WithZone("").Unmap()
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(raw)
		if err != nil {
			return nil, fmt.Errorf("invalid CIDR %q: %w", raw, err)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
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
// ErrDestinationRefused that says which rule refused it otherwise. It sends
// nothing.
func (p *DestinationPolicy) Check(ap netip.AddrPort) error {
	refuse := func(rule string) error { return &destinationError{rule: rule, addr: ap} }
	addrs := spellings(ap.Addr())
	for _, addr := range addrs {
		if p.isAPIServer(netip.AddrPortFrom(addr, ap.Port())) {
			return refuse("the API server")
		}
		if p.isLocal(addr) && !(addr.IsLoopback() && p.loopbackAllowed(addr)) {
			return refuse("an address of the controller itself")
		}
		if r, ok := refusedRangeOf(addr); ok && !p.reopens(r, addr) {
			return refuse(r.rule)
		}
	}
	if !p.inAllowed(addrs) {
		return refuse("outside the allowed networks")
	}
	return nil
}

func (p *DestinationPolicy) isAPIServer(ap netip.AddrPort) bool {
	for _, d := range p.Denied {
		if netip.AddrPortFrom(d.Addr().WithZone("").Unmap(), d.Port()) == ap {
			return true
		}
	}
	return p.apiServers.contains(ap)
}

func (p *DestinationPolicy) isLocal(addr netip.Addr) bool {
	for _, l := range p.Local {
		if l.WithZone("").Unmap() == addr {
			return true
		}
	}
	return false
}

func refusedRangeOf(addr netip.Addr) (refusedRange, bool) {
	for _, r := range alwaysRefused {
		if r.prefix.Contains(addr) {
			return r, true
		}
	}
	return refusedRange{}, false
}

// reopens reports whether the operator opened addr, in the always-refused
// range r, on purpose: by AllowLoopback, or by listing in Allowed a network
// that lies inside r and holds addr. A broad range that merely contains r
// was written for other addresses and reopens nothing.
func (p *DestinationPolicy) reopens(r refusedRange, addr netip.Addr) bool {
	if addr.IsLoopback() && p.AllowLoopback {
		return true
	}
	for _, allowed := range p.Allowed {
		if allowed.Contains(addr) && allowed.Bits() >= r.prefix.Bits() && r.prefix.Contains(allowed.Addr()) {
			return true
		}
	}
	return false
}

func (p *DestinationPolicy) loopbackAllowed(addr netip.Addr) bool {
	r, _ := refusedRangeOf(addr)
	return p.reopens(r, addr)
}

// inAllowed reports whether one of addrs is in Allowed, or Allowed is empty.
func (p *DestinationPolicy) inAllowed(addrs []netip.Addr) bool {
	if len(p.Allowed) == 0 {
		return true
	}
	for _, addr := range addrs {
		if addr.IsLoopback() && p.AllowLoopback {
			return true
		}
		for _, allowed := range p.Allowed {
			if allowed.Contains(addr) {
				return true
			}
		}
	}
	return false
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
// With opts.Kube, the API servers' addresses in the EndpointSlice
// default/kubernetes are refused too and kept current until ctx ends, so an
// API server added or moved later is refused as well.
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
	local, err := LocalAddrs()
	if err != nil {
		return nil, err
	}
	policy := &DestinationPolicy{Allowed: allowed, Denied: apiServer, Local: local, AllowLoopback: opts.AllowLoopback}
	if opts.Kube != nil {
		policy.apiServers = &addrPortSet{}
		if err := policy.watchAPIServerEndpoints(ctx, opts.Kube); err != nil {
			// Out of a cluster, or without the Role to read them: the
			// address the controller itself uses is refused all the same.
			klog.FromContext(ctx).Info("Could not read the API server's endpoints; refusing only its address from the kubeconfig", "err", err)
		}
	}
	return policy, nil
}

// watchAPIServerEndpoints reads the EndpointSlice default/kubernetes once,
// then keeps p.apiServers current through an informer on that one object.
// The first read is direct, so that a controller without the right to read
// it says so once rather than retrying in the background.
func (p *DestinationPolicy) watchAPIServerEndpoints(ctx context.Context, kube kubernetes.Interface) error {
	first, err := APIServerEndpoints(ctx, kube)
	if err != nil {
		return err
	}
	p.apiServers.set(first)
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", apiServerSlice).String()
		}))
	update := func(obj any) {
		if slice, ok := obj.(*discoveryv1.EndpointSlice); ok && slice.Name == apiServerSlice {
			// An API server that left stays refused: its address may
			// come back, and refusing a stale one costs nothing.
			p.apiServers.add(sliceAddrs(slice))
		}
	}
	_, err = factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
	})
	if err != nil {
		return fmt.Errorf("watching the EndpointSlice default/kubernetes: %w", err)
	}
	factory.Start(ctx.Done())
	return nil
}

// apiServerSlice is the EndpointSlice, in default, where the API servers
// publish their own addresses.
const apiServerSlice = "kubernetes"

// APIServerEndpoints returns the addresses behind the default/kubernetes
// Service, where the API servers listen: the API server keeps them in the
// EndpointSlice default/kubernetes.
func APIServerEndpoints(ctx context.Context, kube kubernetes.Interface) ([]netip.AddrPort, error) {
	slice, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, apiServerSlice, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the EndpointSlice default/kubernetes: %w", err)
	}
	return sliceAddrs(slice), nil
}

// sliceAddrs returns every address and port pair of an EndpointSlice.
func sliceAddrs(slice *discoveryv1.EndpointSlice) []netip.AddrPort {
	var out []netip.AddrPort
	for _, port := range slice.Ports {
		if port.Port == nil {
			continue
		}
		for _, ep := range slice.Endpoints {
			for _, a := range ep.Addresses {
				if addr, err := netip.ParseAddr(a); err == nil {
					out = append(out, netip.AddrPortFrom(addr.WithZone("").Unmap(), uint16(*port.Port)))
				}
			}
		}
	}
	return out
}

// addrPortSet is a set of addresses that an informer adds to while sources
// check against it. A nil set is empty.
type addrPortSet struct {
	mu    sync.RWMutex
	addrs map[netip.AddrPort]bool
}

func (s *addrPortSet) set(addrs []netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs = map[netip.AddrPort]bool{}
	for _, a := range addrs {
		s.addrs[a] = true
	}
}

func (s *addrPortSet) add(addrs []netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addrs == nil {
		s.addrs = map[netip.AddrPort]bool{}
	}
	for _, a := range addrs {
		s.addrs[a] = true
	}
}

func (s *addrPortSet) contains(ap netip.AddrPort) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.addrs[ap]
}
