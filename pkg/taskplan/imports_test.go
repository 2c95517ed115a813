package taskplan

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// clientPackages are the packages whose types hold or wrap a client: the
// clientsets, the typed and dynamic clients, informers, listers and their
// caches. The REST machinery that apply configurations link in
// (k8s.io/client-go/rest, discovery) is not among them: a planner uses
// apply configurations as plain values and never builds a client from them.
var clientPackages = []string{
	"k8s.io/client-go/kubernetes",
	"k8s.io/client-go/dynamic",
	"k8s.io/client-go/informers",
	"k8s.io/client-go/listers",
	"k8s.io/client-go/tools/cache",
	"k8s.io/client-go/tools/record",
	"github.com/gputask/gputask-controller/pkg/generated/clientset",
	"github.com/gputask/gputask-controller/pkg/generated/informers",
	"github.com/gputask/gputask-controller/pkg/generated/listers",
}

// holdsClient reports whether pkg is one of clientPackages or below one. A
// scheme only registers types, whatever package it sits in.
func holdsClient(pkg string) bool {
	if path.Base(pkg) == "scheme" {
		return false
	}
	for _, c := range clientPackages {
		if pkg == c || strings.HasPrefix(pkg, c+"/") {
			return true
		}
	}
	return false
}

// TestImportsNoClient: the planner is pure, so that the GPUTask controller
// and a simulator can both call it and one table test covers it. A package
// that holds a client, imported even for one helper, would let side effects
// in; so every package this one builds on is checked, not only its direct
// imports, and each failure names the import that lets a client in.
func TestImportsNoClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if holdsClient(pkg) {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if holdsClient(imp) {
				t.Errorf("pkg/taskplan depends on %s, which imports %s, a package that holds a client: keep the planner pure", pkg, imp)
			}
		}
	}
}

func TestHoldsClient(t *testing.T) {
	for pkg, want := range map[string]bool{
		"k8s.io/client-go/kubernetes":                                                    true,
		"k8s.io/client-go/kubernetes/typed/core/v1":                                      true,
		"k8s.io/client-go/listers/core/v1":                                               true,
		"k8s.io/client-go/tools/cache":                                                   true,
		"k8s.io/client-go/tools/cache/synctrack":                                         true,
		"k8s.io/client-go/kubernetes/scheme":                                             false,
		"k8s.io/client-go/applyconfigurations/core/v1":                                   false,
		"k8s.io/client-go/tools/clientcmd/api":                                           false,
		"github.com/gputask/gputask-controller/pkg/podspec":                              false,
		"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned":        true,
		"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned/scheme": false,
		"github.com/gputask/gputask-controller/pkg/generated/listers/gputask/v1":         true,
	} {
		if got := holdsClient(pkg); got != want {
			t.Errorf("holdsClient(%s) = %v, want %v", pkg, got, want)
		}
	}
}
