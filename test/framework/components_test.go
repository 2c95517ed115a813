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
