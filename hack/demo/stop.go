package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"github.com/gputask/gputask-controller/test/framework"
)

// stopper turns SIGINT and SIGTERM into a clean stop. The first one cancels
// the demo's context: the demo stops every process in order, removes its
// files and exits 0. A later Ctrl-C hurries it along: the processes still
// running get SIGKILL, and the files are removed all the same. A later
// SIGTERM changes nothing, because it is usually the same request twice:
// `timeout make demo` signals make's process group, and make passes the
// SIGTERM it got on to the demo.
type stopper struct {
	signals chan os.Signal
	cancel  context.CancelFunc

	mu      sync.Mutex
	procs   []*framework.Process
	hurried bool
}

// newStopper catches SIGINT and SIGTERM from now on and calls cancel on the
// first.
func newStopper(cancel context.CancelFunc) *stopper {
	s := &stopper{signals: make(chan os.Signal, 2), cancel: cancel}
	signal.Notify(s.signals, syscall.SIGINT, syscall.SIGTERM)
	go s.watch()
	return s
}

func (s *stopper) watch() {
	<-s.signals
	s.cancel()
	for sig := range s.signals {
		if sig == syscall.SIGINT {
			s.hurry()
		}
	}
}

// stopping names the processes the demo is about to stop, for a Ctrl-C
// that comes while they stop.
func (s *stopper) stopping(procs []*framework.Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs = procs
	if s.hurried {
		s.killLocked()
	}
}

func (s *stopper) hurry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hurried = true
	s.killLocked()
}

func (s *stopper) killLocked() {
	for _, p := range s.procs {
		if !p.Exited() {
			// Each process leads its own group; the group holds what it started.
			_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		}
	}
}

// stoppedByUser reports whether err only says that the demo is stopping:
// ctx has ended (Ctrl-C, SIGTERM or -for), or a kubectl the demo was
// running died of the same Ctrl-C, which the terminal sends to the demo's
// whole process group and which may end kubectl before the demo has
// cancelled ctx.
func stoppedByUser(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return false
	}
	status, ok := exitErr.Sys().(syscall.WaitStatus)
	return ok && status.Signaled() && status.Signal() == syscall.SIGINT
}
