package framework

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseIPv4Routes(t *testing.T) {
	const table = `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	00000000	010200C0	0003	0	0	0	00000000	0	0	0
eth0	000200C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
br0	0000590A	00000000	0001	0	0	0	0000FFFF	0	0	0
`
	routes, err := parseIPv4Routes(bufio.NewScanner(strings.NewReader(table)))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("10.89.0.0/16")}
	if len(routes) != len(want) {
		t.Fatalf("got %v, want %v", routes, want)
	}
	for i := range want {
		if routes[i] != want[i] {
			t.Errorf("route %d: got %v, want %v", i, routes[i], want[i])
		}
	}
}

// TestBridge creates a bridge, serves on its address, refuses a second
// bridge on an overlapping network, and leaves no link behind; a bridge
// left by a run that died is replaced.
func TestBridge(t *testing.T) {
	const name = "gputask-fwtest"
	prefix := netip.MustParsePrefix("10.89.254.1/30")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// What a run killed before its cleanup leaves: the link, without the lock.
	if err := ipCommand("link", "add", "name", name, "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	b, err := CreateBridge(ctx, name, prefix)
	if err != nil {
		_ = deleteLink(name)
		t.Fatal(err)
	}
	deleted := false
	defer func() {
		if !deleted {
			_ = b.Delete()
		}
	}()

	l, err := net.Listen("tcp", netip.AddrPortFrom(b.Addr(), 0).String())
	if err != nil {
		t.Fatalf("listening on the bridge: %v", err)
	}
	_ = l.Close()
	if _, err := CreateBridge(ctx, "gputask-fwtest2", netip.MustParsePrefix("10.89.254.2/24")); err == nil || !strings.Contains(err.Error(), "in use") {
		_ = deleteLink("gputask-fwtest2")
		t.Errorf("a second bridge on an overlapping network: got %v, want an in-use error", err)
	}

	if err := b.Delete(); err != nil {
		t.Fatal(err)
	}
	deleted = true
	if _, err := net.InterfaceByName(name); err == nil {
		t.Errorf("link %s still there after Delete", name)
	}
}
