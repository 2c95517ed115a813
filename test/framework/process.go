package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGracePeriod is how long a process may take to exit after SIGTERM before
// its whole process group gets SIGKILL.
const stopGracePeriod = 10 * time.Second

// Process is one control-plane component or controller running as a child
// process in its own process group, with its output in a log file.
type Process struct {
	// Name identifies the process in errors and logs.
	Name string
	// LogPath is the file that holds the process's stdout and stderr.
	LogPath string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	waitErr error

	stopOnce sync.Once
}

// StartProcess starts binary with args, logging to logPath. extraEnv is added
// to the current environment.
func StartProcess(name, logPath, binary string, args []string, extraEnv ...string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("starting %s: opening log: %w", name, err)
	}
	fmt.Fprintf(logFile, "### %s %s\n", binary, strings.Join(args, " "))

	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), extraEnv...)
	// A process group of its own lets Stop reach the children a component may
	// start, and keeps a terminal's Ctrl-C from hitting the components before
	// their parent has had a chance to stop them in order. Pdeathsig kills the
	// component if its parent dies without cleaning up (a test timeout, say).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go p.wait()
	return p, nil
}

func (p *Process) wait() {
	p.waitErr = p.cmd.Wait()
	p.logFile.Close()
	close(p.done)
}

// Pid returns the process id, which is also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitError returns how the process ended, or nil while it runs.
func (p *Process) ExitError() error {
	if !p.Exited() {
		return nil
	}
	if p.waitErr == nil {
		return fmt.Errorf("%s exited with status 0", p.Name)
	}
	return fmt.Errorf("%s exited: %w", p.Name, p.waitErr)
}

// Stop sends SIGTERM to the process group and SIGKILL if the process has not
// exited within the grace period. It is safe to call more than once.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		p.signalGroup(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGracePeriod):
			p.signalGroup(syscall.SIGKILL)
			<-p.done
		}
		// The leader is gone; make sure nothing it started is left behind.
		p.signalGroup(syscall.SIGKILL)
	})
}

// Kill sends SIGKILL to the process group and waits for the process to exit,
// the way a node crash or an OOM kill ends a controller.
func (p *Process) Kill() {
	p.stopOnce.Do(func() {
		p.signalGroup(syscall.SIGKILL)
		<-p.done
	})
}

func (p *Process) signalGroup(sig syscall.Signal) {
	// ESRCH only means the group is already gone.
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// LogTail returns the last n lines of the process's log, for error messages.
func (p *Process) LogTail(n int) string {
	return tailFile(p.LogPath, n)
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// errExited marks a readiness wait that ended because the process died.
var errExited = errors.New("process exited")

// waitReady polls ready every interval until it returns true, the process
// exits, or ctx ends. The error names the process and quotes its log.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		if ready(ctx) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s did not become ready: %w (%v); last log lines of %s:\n%s",
				p.Name, errExited, p.waitErr, p.LogPath, p.LogTail(20))
		case <-ctx.Done():
			return fmt.Errorf("%s did not become ready within %s: %w; last log lines of %s:\n%s",
				p.Name, timeout, ctx.Err(), p.LogPath, p.LogTail(20))
		case <-ticker.C:
		}
	}
}
