package framework

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
)

// BuildNodeImage builds test/node/pause as a static binary and writes it as
// the only file of an OCI image archive named NodeImage, which StartNode
// imports. It returns the archive's path in dir. Nothing is pulled: the
// image is made of a binary built here.
func BuildNodeImage(root, dir string) (string, error) {
	return BuildGoImage(root, dir, NodeImage, "./test/node/pause")
}

// BuildGoImage builds the Go program pkg (a path relative to root, such as
// ./test/node/worker) as a static binary and writes an OCI image archive
// named ref whose one file and entrypoint is that binary, for
// Node.ImportImage. It returns the archive's path in dir.
func BuildGoImage(root, dir, ref, pkg string) (string, error) {
	name := filepath.Base(pkg)
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w: %s", pkg, err, out)
	}
	program, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	archive, err := ociArchive(ref, map[string][]byte{name: program}, []string{"/" + name})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+"-image.tar")
	return path, os.WriteFile(path, archive, 0o644)
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ociArchive returns an OCI image layout, as a tar, of one image named ref
// with one layer holding files (mode 0755) and entrypoint as its command.
func ociArchive(ref string, files map[string][]byte, entrypoint []string) ([]byte, error) {
	blobs := map[string][]byte{}
	add := func(mediaType string, data []byte) ociDescriptor {
		digest := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
		blobs[digest] = data
		return ociDescriptor{MediaType: mediaType, Digest: digest, Size: len(data)}
	}

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(files[name])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[name]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerDesc := add("application/vnd.oci.image.layer.v1.tar", layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entrypoint},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return nil, err
	}
	configDesc := add("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []ociDescriptor{layerDesc},
	})
	if err != nil {
		return nil, err
	}
	manifestDesc := add("application/vnd.oci.image.manifest.v1+json", manifest)
	// containerd names the imported image after io.containerd.image.name.
	manifestDesc.Annotations = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []ociDescriptor{manifestDesc}})
	if err != nil {
		return nil, err
	}

	var out bytes.Buffer
	aw := tar.NewWriter(&out)
	write := func(name string, data []byte) error {
		if err := aw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := aw.Write(data)
		return err
	}
	if err := write("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}
	if err := write("index.json", index); err != nil {
		return nil, err
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	slices.Sort(digests)
	for _, d := range digests {
		if err := write("blobs/sha256/"+d[len("sha256:"):], blobs[d]); err != nil {
			return nil, err
		}
	}
	if err := aw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
