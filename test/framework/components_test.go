package framework

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A component that dies before it is ready, as kwok does when another
// process took its port between FreePort and its bind, is started again;
// one that keeps dying fails after startAttempts starts, saying it died.
func TestComponentThatDiesIsStartedAgain(t *testing.T) {
	for _, tc := range []struct {
		name       string
		dies       int // how many starts die at once
		wantStarts int
		wantErr    bool
	}{
		{name: "ready at once", dies: 0, wantStarts: 1},
		{name: "dies once", dies: 1, wantStarts: 2},
		{name: "always dies", dies: startAttempts, wantStarts: startAttempts, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := &ControlPlane{Dir: t.TempDir(), nextLog: map[string]int{}}
			t.Cleanup(func() {
				for _, p := range cp.procs {
					p.Stop()
				}
			})
			starts := 0
			c := component{
				start: func() (*Process, int, error) {
					starts++
					script := "exec sleep 60"
					if starts <= tc.dies {
						script = "echo bind: address already in use; exit 1"
					}
					p, err := cp.startBinary("component", "/bin/sh", nil, "-c", script)
					return p, starts, err
				},
				// Ready once a start that lives has come.
				ready: func(p *Process, start int) error {
					return p.waitReady(context.Background(), time.Minute, func(context.Context) bool { return start > tc.dies })
				},
			}
			p, port, err := c.start()
			if err != nil {
				t.Fatal(err)
			}
			err = c.readyOrStartAgain(p, port)
			if starts != tc.wantStarts {
				t.Errorf("%d starts, want %d", starts, tc.wantStarts)
			}
			if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, errExited)) {
				t.Errorf("error %v, want one: %v, saying the process exited", err, tc.wantErr)
			}
		})
	}
}

// ServingAddr reads the address from the controller's "Serving ..." line,
// the one of the server asked for, and says so when the controller exits
// before serving it, as it does when its address is taken.
func TestServingAddr(t *testing.T) {
	const log = `echo 'I1206 16:15:56.97 1 server.go:90] "Serving health probes" addr="127.0.0.1:41001"'; ` +
		`echo 'I1206 16:15:56.98 1 server.go:90] "Serving metrics" addr="127.0.0.1:41002"'; `
	for _, tc := range []struct {
		name, script, server, want string
	}{
		{name: "metrics", script: log + "exec sleep 60", server: "metrics", want: "127.0.0.1:41002"},
		{name: "health probes", script: log + "exec sleep 60", server: "health probes", want: "127.0.0.1:41001"},
		{name: "exits first", script: "echo listening for metrics on 127.0.0.1:41002: bind: address already in use; exit 1", server: "metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := &ControlPlane{Dir: t.TempDir(), nextLog: map[string]int{}}
			p, err := cp.startBinary(BinController, "/bin/sh", nil, "-c", tc.script)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Stop)
			got, err := ServingAddr(context.Background(), p, tc.server, time.Minute)
			if got != tc.want || (tc.want == "") != errors.Is(err, errExited) {
				t.Errorf("ServingAddr(%q) = %q, %v; want %q and an error only if the process exited", tc.server, got, err, tc.want)
			}
		})
	}
}
