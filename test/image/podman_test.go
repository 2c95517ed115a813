//go:build image

package image

import (
	"context"
	"strings"
	"testing"

	"github.com/gputask/gputask-controller/test/framework"
)

// podman is the framework's Podman with helpers that fail the test.
type podman struct {
	*framework.Podman
}

// newPodman prepares the private storage. When the test ends, every
// container and image in it is removed and the directory deleted.
func newPodman(t *testing.T, repoRoot string) *podman {
	t.Helper()
	p, err := framework.NewPodman(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return &podman{p}
}

// PodmanT is Podman that fails the test on error.
func (p *podman) PodmanT(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), framework.PodmanCommandTimeout)
	defer cancel()
	out, err := p.Exec(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}
