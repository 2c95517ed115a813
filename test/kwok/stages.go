// Package kwok holds the kwok Stage files that give the fake GPU nodes of the
// tests and of `make demo` their behaviour. Nodes become Ready and keep a
// heartbeat, bound pods start at once, pods being deleted go away, and a pod
// can be told to exit through the GPUTASK_FAKE_EXIT_CODE env var, or to take
// 15 s to become Ready through GPUTASK_FAKE_STARTUP=slow.
//
// They are embedded so that the test harness and the demo use the very same
// files, whatever their working directory.
package kwok

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// FakeExitCodeEnv is the env var that makes a Running pod on a fake node end
// with its value as exit code: "0" succeeds, anything else fails.
const FakeExitCodeEnv = "GPUTASK_FAKE_EXIT_CODE"

// FakeStartupEnv set to FakeStartupSlow on a pod's first container makes it
// become Ready only after SlowStartup, as a GPU worker loading a model would.
const (
	FakeStartupEnv  = "GPUTASK_FAKE_STARTUP"
	FakeStartupSlow = "slow"
	SlowStartup     = 15 * time.Second
)

//go:embed *.yaml
var stages embed.FS

// StageFiles returns the names of the embedded Stage files, sorted.
func StageFiles() ([]string, error) {
	names, err := fs.Glob(stages, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing kwok stages: %w", err)
	}
	sort.Strings(names)
	return names, nil
}

// WriteStages writes every Stage file into dir and returns their paths, ready
// to be passed to kwok as "-c <path>" each.
func WriteStages(dir string) ([]string, error) {
	names, err := StageFiles()
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(names))
	for _, name := range names {
		data, err := stages.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("reading kwok stage %s: %w", name, err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return nil, fmt.Errorf("writing kwok stage %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}
