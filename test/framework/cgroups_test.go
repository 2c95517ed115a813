package framework

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The node's cleanup finds the kubelet's and containerd's cgroups on a
// cgroup v1 host (one hierarchy per controller) and on a cgroup v2 one
// (one hierarchy, marked by cgroup.controllers), deepest first, and
// nothing else.
func TestNodeCgroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string // made below the mount; a path ending in / is a directory
		want  []string
	}{{
		name:  "cgroup v1",
		files: []string{"cpu/kubepods/besteffort/pod1/", "memory/kubepods/", "cpu/k8s.io/abc/", "cpu/user.slice/"},
		want:  []string{"cpu/kubepods/besteffort/pod1", "cpu/k8s.io/abc", "cpu/kubepods/besteffort", "cpu/k8s.io", "cpu/kubepods", "memory/kubepods"},
	}, {
		name:  "cgroup v2",
		files: []string{"cgroup.controllers", "kubepods/burstable/pod2/", "k8s.io/def/", "system.slice/containerd.service/"},
		want:  []string{"kubepods/burstable/pod2", "kubepods/burstable", "k8s.io/def", "kubepods", "k8s.io"},
	}, {
		name:  "cgroup v2 without the node's cgroups",
		files: []string{"cgroup.controllers", "system.slice/"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				path := filepath.Join(root, f)
				if strings.HasSuffix(f, "/") {
					if err := os.MkdirAll(path, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.WriteFile(path, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for _, d := range nodeCgroups(root) {
				rel, _ := filepath.Rel(root, d)
				got = append(got, rel)
			}
			// Deepest first; the order within a depth does not matter.
			depth := func(p string) int { return strings.Count(p, "/") }
			for i := 1; i < len(got); i++ {
				if depth(got[i]) > depth(got[i-1]) {
					t.Errorf("%s comes after the shallower %s", got[i], got[i-1])
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("cgroups = %v, want %v", got, want)
			}
		})
	}
}
