//go:build !windows

package signals

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestFirstSignalCancelsSecondExits(t *testing.T) {
	ch := make(chan os.Signal, 2)
	exited := make(chan int, 1)
	ctx := notifyContext(context.Background(), ch, func(code int) { exited <- code })

	select {
	case <-ctx.Done():
		t.Fatal("context cancelled before any signal")
	default:
	}

	ch <- os.Interrupt
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("context not cancelled after the first signal")
	}
	select {
	case code := <-exited:
		t.Fatalf("exit(%d) after only one signal", code)
	case <-time.After(50 * time.Millisecond):
	}

	ch <- syscall.SIGTERM
	select {
	case code := <-exited:
		if code != 1 {
			t.Errorf("exit code = %d, want 1", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit after the second signal")
	}
}

// helperEnv makes the test binary act as a process that uses
// SetupSignalContext, so real signals (and the exit on the second one) are
// tested in a child rather than in the test process itself.
const helperEnv = "GPUTASK_SIGNALS_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		runHelper()
		return
	}
	os.Exit(m.Run())
}

func runHelper() {
	ctx := SetupSignalContext()
	if SetupSignalContext() != ctx {
		fmt.Println("second call returned another context")
		os.Exit(3)
	}
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("cancelled")
	// Simulate a slow shutdown; the second signal must end it with code 1.
	time.Sleep(time.Minute)
	os.Exit(4)
}

func TestSetupSignalContextRealSignals(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	expectLine := func(want string) {
		t.Helper()
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("helper printed %q (err %v), want %q", lines.Text(), lines.Err(), want)
		}
	}

	expectLine("ready")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expectLine("cancelled")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
			t.Errorf("helper ended with %v, want exit code 1", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not exit after the second signal")
	}
}
