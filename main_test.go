package main

import (
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	fs := flag.NewFlagSet("gputask-controller", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	opts := newCommandLine(fs)
	if err := fs.Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	if first, _, _ := strings.Cut(help, "\n"); !strings.Contains(first, "gputask-controller") || !strings.Contains(first, "README") {
		t.Errorf("--help opens with %q, want what the program is and where the README is", first)
	}
	own, logging := strings.Index(help, "-workers"), strings.Index(help, "Logging flags (klog)")
	if own < 0 || logging < 0 || own > logging || !strings.Contains(help[logging:], "-v value") {
		t.Errorf("--help lists the project's flags, then klog's; got:\n%s", help)
	}
	// Both sets of flags parse.
	if err := fs.Parse([]string{"--workers=3", "-v=0", "--leader-elect-resource-name=x"}); err != nil || opts.Workers != 3 || opts.LeaderElection.ResourceName != "x" {
		t.Errorf("Parse = %v, workers %d, lease %q", err, opts.Workers, opts.LeaderElection.ResourceName)
	}

	// The operations guide's flag table says what --help says, for every
	// flag of the project's own.
	doc, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"workers", "task-workers"} {
		f := fs.Lookup(name)
		if row := "| `--" + name + "` | " + f.DefValue + " | " + f.Usage + " |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/operations.md has no row %q", row)
		}
	}
}
