//go:build image

package image

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commandTimeout bounds one podman or buildah command; an image build on a
// busy 2-core machine compiles the whole dependency tree.
const commandTimeout = 20 * time.Minute

// podman runs podman and buildah with storage of their own in a temporary
// directory, so that the test sees and removes only what it made and never
// touches the images or containers of anyone else on the machine.
type podman struct {
	root string
	// env points both tools at hack/image/containers.conf and the private
	// storage.
	env []string
}

// newPodman prepares the private storage. When the test ends, every
// container and image in it is removed and the directory deleted.
func newPodman(t *testing.T, repoRoot string) *podman {
	t.Helper()
	for _, tool := range []string{"podman", "buildah", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run hack/image/ensure-tools.sh (make test-image does)", tool)
		}
	}
	// Short and outside t.TempDir: conmon's socket paths are limited to 108
	// bytes, and the overlay mounts must be gone before the directory is.
	root, err := os.MkdirTemp("", "gputask-image-")
	if err != nil {
		t.Fatal(err)
	}
	storageConf := filepath.Join(root, "storage.conf")
	conf := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n",
		filepath.Join(root, "storage"), filepath.Join(root, "run"))
	if err := os.WriteFile(storageConf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &podman{
		root: root,
		env: append(os.Environ(),
			"CONTAINERS_CONF="+filepath.Join(repoRoot, "hack", "image", "containers.conf"),
			"CONTAINERS_STORAGE_CONF="+storageConf,
		),
	}
	t.Cleanup(func() { p.removeAll(t) })
	return p
}

// removeAll removes every container and image of the private storage, then
// the directory. The storage is the test's own, so "all" is only its own.
func (p *podman) removeAll(t *testing.T) {
	ctx := context.Background()
	steps := []func() (string, error){
		func() (string, error) { return p.Podman(ctx, "rm", "--force", "--all", "--time=0") },
		func() (string, error) { return p.command(ctx, "buildah", "rm", "--all") },
		func() (string, error) { return p.Podman(ctx, "rmi", "--force", "--all") },
	}
	for _, step := range steps {
		if out, err := step(); err != nil {
			t.Errorf("cleanup: %v\n%s", err, out)
		}
	}
	if err := os.RemoveAll(p.root); err != nil {
		t.Errorf("cleanup: removing %s: %v", p.root, err)
	}
}

// Podman runs podman with the flags this machine needs and returns its
// stdout; the error carries stderr.
func (p *podman) Podman(ctx context.Context, args ...string) (string, error) {
	return p.command(ctx, "podman", append(p.globalFlags(), args...)...)
}

// PodmanCombined is Podman with stdout and stderr together, for `podman logs`.
func (p *podman) PodmanCombined(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", append(p.globalFlags(), args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (p *podman) globalFlags() []string {
	return []string{
		"--runtime=/usr/sbin/runc",
		"--cgroup-manager=cgroupfs",
		// libpod's own state (locks, events, exit codes) next to the storage
		// instead of the machine-wide /run/libpod.
		"--tmpdir=" + filepath.Join(p.root, "libpod"),
	}
}

// PodmanT is Podman that fails the test on error.
func (p *podman) PodmanT(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := p.Podman(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// RunT runs a program (a script that calls buildah, say) with the podman
// environment, in dir.
func (p *podman) RunT(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = p.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func (p *podman) command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = p.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
