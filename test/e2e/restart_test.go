package e2e

import (
	"context"
	"testing"
	"time"
)

// TestControllerCrashAndRestart SIGKILLs the controller, as an OOM kill or a
// lost node would, creates a task while it is down, and starts a new one. The
// new controller picks the task up, and the pod of a task that ran before the
// crash is adopted, not replaced.
func TestControllerCrashAndRestart(t *testing.T) {
	ns := cp.NamespaceT(t)
	ctx := context.Background()

	createTask(t, cp, ns, newTask("before", gpuModel, 1))
	waitTask(t, cp, ns, "before", "Running", taskRunning)
	podBefore := podsOf(t, ns, "before")

	controller.Kill()
	if !controller.Exited() {
		t.Fatal("controller still runs after SIGKILL")
	}
	createTask(t, cp, ns, newTask("during", gpuModel, 1))
	time.Sleep(time.Second)
	if pods := podsOf(t, ns, "during"); len(pods) != 0 {
		t.Fatalf("task created while the controller was down has pods %v", pods)
	}

	restarted, err := cp.StartController(ctx, "--workers=4")
	if err != nil {
		t.Fatal(err)
	}
	controller = restarted
	waitTask(t, cp, ns, "during", "Running", taskRunning)
	if got := podsOf(t, ns, "before"); len(got) != 1 || got[0] != podBefore[0] {
		t.Errorf("pods of the task that ran before the crash: %v, want the same %v", got, podBefore)
	}
	if got := podsOf(t, ns, "during"); len(got) != 1 {
		t.Errorf("task created during the outage has pods %v, want exactly one", got)
	}
}
