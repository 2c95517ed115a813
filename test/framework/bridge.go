package framework

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bridge is a Linux bridge that a test creates with one address of its
// own. A server that the API server must reach through an EndpointSlice
// (an extension API server, a webhook by Service) listens there: the API
// server refuses loopback endpoints, and the bridge keeps the traffic on
// this machine without touching a real interface. Creating one needs root
// (CAP_NET_ADMIN) and iproute2's ip.
type Bridge struct {
	Name string
	// Prefix is the bridge's address and network, such as 10.89.0.1/24.
	Prefix netip.Prefix
	lock   *os.File
}

// Addr is the bridge's own address, where a test's server listens.
func (b *Bridge) Addr() netip.Addr { return b.Prefix.Addr() }

// CreateBridge creates bridge name with address prefix. A run of the same
// test elsewhere on the machine holds a lock on the name until it deletes
// its bridge, and CreateBridge waits for it (until ctx ends). A bridge of
// that name left by a run that died is deleted first. It fails, creating
// nothing, when prefix overlaps an address or a route of the machine.
func CreateBridge(ctx context.Context, name string, prefix netip.Prefix) (*Bridge, error) {
	if len(name) > 15 {
		return nil, fmt.Errorf("bridge name %q is longer than 15 characters", name)
	}
	lock, err := lockBridgeName(ctx, name)
	if err != nil {
		return nil, err
	}
	b := &Bridge{Name: name, Prefix: prefix, lock: lock}
	if err := deleteLink(name); err != nil {
		b.unlock()
		return nil, err
	}
	if err := checkPrefixFree(prefix); err != nil {
		b.unlock()
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "add", "name", name, "type", "bridge"},
		{"addr", "add", prefix.String(), "dev", name},
		{"link", "set", name, "up"},
	} {
		if err := ipCommand(args...); err != nil {
			_ = b.Delete()
			return nil, err
		}
	}
	return b, nil
}

// CreateBridgeT creates a bridge for one test and deletes it when the test
// ends, whether it passed or not.
func CreateBridgeT(t testing.TB, name string, prefix netip.Prefix) *Bridge {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b, err := CreateBridge(ctx, name, prefix)
	if err != nil {
		t.Fatalf("creating bridge %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := b.Delete(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return b
}

// Delete deletes the bridge, by name, and releases its lock.
func (b *Bridge) Delete() error {
	defer b.unlock()
	return deleteLink(b.Name)
}

func (b *Bridge) unlock() {
	if b.lock != nil {
		_ = b.lock.Close() // closing releases the flock
		b.lock = nil
	}
}

// lockBridgeName takes an exclusive flock on a file named after the bridge.
// The kernel releases it when the process exits, however it exits, so a
// run that died leaves no lock behind, only perhaps its bridge.
func lockBridgeName(ctx context.Context, name string) (*os.File, error) {
	path := filepath.Join(os.TempDir(), "gputask-bridge-"+name+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("bridge %s is held by another run (%s): %w", name, path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// deleteLink deletes the link called name if there is one.
func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil // no such link
	}
	return ipCommand("link", "delete", name)
}

func ipCommand(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// checkPrefixFree fails when prefix overlaps an address of an interface or
// a route other than the default one: the bridge would then shadow a
// network this machine really reaches.
func checkPrefixFree(prefix netip.Prefix) error {
	prefix = prefix.Masked()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		ipNet, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if p, ok := netipPrefix(ipNet); ok && p.Overlaps(prefix) {
			return fmt.Errorf("%s is in use: it overlaps %s of this machine", prefix, ipNet)
		}
	}
	routes, err := ipv4Routes()
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.Bits() > 0 && r.Overlaps(prefix) {
			return fmt.Errorf("%s is in use: it overlaps the route to %s", prefix, r)
		}
	}
	return nil
}

func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(addr.Unmap(), ones).Masked(), true
}

// ipv4Routes reads the destinations of the main IPv4 routing table from
// /proc/net/route, where addresses and masks are hexadecimal in host byte
// order.
func ipv4Routes() ([]netip.Prefix, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, fmt.Errorf("reading routes: %w", err)
	}
	defer f.Close()
	return parseIPv4Routes(bufio.NewScanner(f))
}

func parseIPv4Routes(s *bufio.Scanner) ([]netip.Prefix, error) {
	var routes []netip.Prefix
	header := true
	for s.Scan() {
		if header {
			header = false
			continue
		}
		fields := strings.Fields(s.Text())
		if len(fields) < 8 {
			continue
		}
		dst, err1 := strconv.ParseUint(fields[1], 16, 32)
		mask, err2 := strconv.ParseUint(fields[7], 16, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("reading routes: bad line %q", s.Text())
		}
		var d, m [4]byte
		binary.LittleEndian.PutUint32(d[:], uint32(dst))
		binary.LittleEndian.PutUint32(m[:], uint32(mask))
		ones, _ := net.IPMask(m[:]).Size()
		routes = append(routes, netip.PrefixFrom(netip.AddrFrom4(d), ones).Masked())
	}
	return routes, s.Err()
}
