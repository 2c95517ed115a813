package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Images that BuildControllerImage makes, in the Podman's own storage.
const (
	BuilderImage = "localhost/gputask-builder:test"
	RuntimeImage = "localhost/gputask-runtime:test"
)

// PodmanCommandTimeout bounds one podman or buildah command; an image build
// on a busy 2-core machine compiles the whole dependency tree.
const PodmanCommandTimeout = 20 * time.Minute

// Podman runs podman and buildah with storage of their own in a temporary
// directory, so that a test sees and removes only what it made and never
// touches the images or containers of anyone else on the machine.
type Podman struct {
	root     string
	repoRoot string
	// env points both tools at hack/image/containers.conf and the private
	// storage.
	env []string
}

// NewPodman prepares the private storage; Close removes it.
func NewPodman(repoRoot string) (*Podman, error) {
	for _, tool := range []string{"podman", "buildah", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found: run hack/image/ensure-tools.sh", tool)
		}
	}
	// Short and outside a test's TempDir: conmon's socket paths are limited
	// to 108 bytes, and the overlay mounts must be gone before the directory
	// is.
	root, err := os.MkdirTemp("", "gputask-image-")
	if err != nil {
		return nil, err
	}
	storageConf := filepath.Join(root, "storage.conf")
	conf := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n",
		filepath.Join(root, "storage"), filepath.Join(root, "run"))
	if err := os.WriteFile(storageConf, []byte(conf), 0o644); err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	return &Podman{
		root:     root,
		repoRoot: repoRoot,
		env: append(os.Environ(),
			"CONTAINERS_CONF="+filepath.Join(repoRoot, "hack", "image", "containers.conf"),
			"CONTAINERS_STORAGE_CONF="+storageConf,
		),
	}, nil
}

// Close removes every container and image of the private storage, then the
// directory. The storage is the Podman's own, so "all" is only its own.
func (p *Podman) Close() error {
	ctx := context.Background()
	var errs []error
	for _, step := range []func() (string, error){
		func() (string, error) { return p.Exec(ctx, "rm", "--force", "--all", "--time=0") },
		func() (string, error) { return p.command(ctx, "buildah", "rm", "--all") },
		func() (string, error) { return p.Exec(ctx, "rmi", "--force", "--all") },
	} {
		if out, err := step(); err != nil {
			errs = append(errs, fmt.Errorf("%w\n%s", err, out))
		}
	}
	if err := os.RemoveAll(p.root); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", p.root, err))
	}
	return errors.Join(errs...)
}

// Exec runs podman with the flags this machine needs and returns its
// stdout; the error carries stderr.
func (p *Podman) Exec(ctx context.Context, args ...string) (string, error) {
	return p.command(ctx, "podman", append(p.globalFlags(), args...)...)
}

// ExecCombined is Exec with stdout and stderr together, for `podman logs`.
func (p *Podman) ExecCombined(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", append(p.globalFlags(), args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (p *Podman) globalFlags() []string {
	return []string{
		"--runtime=/usr/sbin/runc",
		"--cgroup-manager=cgroupfs",
		// libpod's own state (locks, events, exit codes) next to the storage
		// instead of the machine-wide /run/libpod.
		"--tmpdir=" + filepath.Join(p.root, "libpod"),
	}
}

// Run runs a program (a script that calls buildah, say) with the podman
// environment, in dir.
func (p *Podman) Run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = p.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func (p *Podman) command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = p.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// BuildControllerImage builds the controller's image from the Dockerfile as
// tag, on base images assembled here (hack/image/base-images.sh), offline:
// the host's module cache is mounted read-only and the build cache shared,
// so a second build compiles little.
func (p *Podman) BuildControllerImage(ctx context.Context, tag string) error {
	if err := p.Run(ctx, p.repoRoot, filepath.Join(p.repoRoot, "hack", "image", "base-images.sh"), BuilderImage, RuntimeImage); err != nil {
		return err
	}
	goEnv := func(name string) (string, error) {
		out, err := exec.CommandContext(ctx, "go", "env", name).Output()
		return strings.TrimSpace(string(out)), err
	}
	if err := p.Run(ctx, p.repoRoot, "go", "mod", "download"); err != nil {
		return err
	}
	modCache, err := goEnv("GOMODCACHE")
	if err != nil {
		return err
	}
	buildCache, err := goEnv("GOCACHE")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(buildCache, 0o755); err != nil {
		return err
	}
	_, err = p.Exec(ctx, "build",
		"--file="+filepath.Join(p.repoRoot, "Dockerfile"),
		"--network=none",
		"--build-arg=BUILDER_IMAGE="+BuilderImage,
		"--build-arg=RUNTIME_IMAGE="+RuntimeImage,
		"--build-arg=GOPROXY=off",
		"--volume="+modCache+":/go/pkg/mod:ro",
		"--volume="+buildCache+":/root/.cache/go-build",
		"--tag="+tag,
		p.repoRoot)
	return err
}

// SaveArchive writes an image to a docker archive that `ctr images import`
// reads, under every name given: the first names the image, the others are
// more tags of it.
func (p *Podman) SaveArchive(ctx context.Context, path, image string, tags ...string) error {
	for _, tag := range tags {
		if _, err := p.Exec(ctx, "tag", image, tag); err != nil {
			return err
		}
	}
	_, err := p.Exec(ctx, append([]string{"save", "--format=docker-archive", "--output=" + path, image}, tags...)...)
	return err
}
