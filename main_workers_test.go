package main

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestTaskWorkersFlag(t *testing.T) {
	fs := flag.NewFlagSet("gputask-controller", flag.ContinueOnError)
	cfg := newCommandLine(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.taskWorkers != DefaultTaskWorkers || cfg.workers != 2 {
		t.Errorf("defaults: task workers %d, workers %d; want %d and 2", cfg.taskWorkers, cfg.workers, DefaultTaskWorkers)
	}
	if err := fs.Parse([]string{"--task-workers=0"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "--task-workers must be at least 1") {
		t.Errorf("validate() = %v, want the --task-workers error", err)
	}

	// The README's flag table says what --help says.
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	usage := fs.Lookup("task-workers").Usage
	if row := "| `--task-workers` | " + strconv.Itoa(DefaultTaskWorkers) + " | " + usage + " |"; !strings.Contains(string(readme), row) {
		t.Errorf("README.md has no row %q", row)
	}
}
