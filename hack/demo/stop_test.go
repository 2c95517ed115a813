package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gputask/gputask-controller/test/framework"
)

func TestStoppedByUser(t *testing.T) {
	exitErr := func(script string) error {
		err := exec.Command("sh", "-c", script).Run()
		if err == nil {
			t.Fatalf("sh -c %q succeeded", script)
		}
		return err
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"context cancelled", cancelled, errors.New("creating node: connection refused"), true},
		{"a real failure", context.Background(), errors.New("creating node: connection refused"), false},
		{"kubectl killed by Ctrl-C", context.Background(), fmt.Errorf("kubectl apply: %w: ", exitErr("kill -INT $$")), true},
		{"kubectl killed otherwise", context.Background(), fmt.Errorf("kubectl apply: %w: ", exitErr("kill -KILL $$")), false},
		{"kubectl failed", context.Background(), fmt.Errorf("kubectl apply: %w: ", exitErr("exit 1")), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := stoppedByUser(tc.ctx, tc.err); got != tc.want {
				t.Errorf("stoppedByUser(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestStopper feeds signals to a stopper the way the runtime would: the
// first cancels, a repeated SIGTERM changes nothing, a Ctrl-C kills the
// processes being stopped.
func TestStopper(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Unbuffered, so that each send returns once watch has taken the signal,
	// and the next send once watch has handled it.
	s := &stopper{signals: make(chan os.Signal), cancel: cancel}
	go s.watch()
	defer close(s.signals)

	sleeper := startSleep(t)
	s.stopping([]*framework.Process{sleeper})

	s.signals <- syscall.SIGTERM
	<-ctx.Done()
	s.signals <- syscall.SIGTERM
	s.signals <- syscall.SIGTERM
	if sleeper.Exited() {
		t.Fatalf("a repeated SIGTERM killed the process: %v", sleeper.ExitError())
	}

	s.signals <- syscall.SIGINT
	<-sleeper.Done()
	if err := sleeper.ExitError(); !killed(err) {
		t.Errorf("after a second Ctrl-C the process ended with %v, want SIGKILL", err)
	}

	// Processes named after the Ctrl-C are killed at once.
	late := startSleep(t)
	s.stopping([]*framework.Process{late})
	<-late.Done()
	if err := late.ExitError(); !killed(err) {
		t.Errorf("a process named after the Ctrl-C ended with %v, want SIGKILL", err)
	}
}

func startSleep(t *testing.T) *framework.Process {
	t.Helper()
	p, err := framework.StartProcess("sleep", filepath.Join(t.TempDir(), "sleep.log"), "sleep", []string{"600"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func killed(err error) bool {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return false
	}
	status, ok := exitErr.Sys().(syscall.WaitStatus)
	return ok && status.Signaled() && status.Signal() == syscall.SIGKILL
}
