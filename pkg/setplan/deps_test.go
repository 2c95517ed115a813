package setplan

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The plan is what the set controller and the replay share. It stays pure
// only as long as nothing it imports reaches a client or a controller, and
// the replay stays a simulator only as long as it reaches no controller:
// these tests read the real import graph, as the go command builds it.

const module = "github.com/gputask/gputask-controller"

// controllerPackages run controllers or wire them together.
var controllerPackages = []string{module + "/pkg/taskset", module + "/pkg/autoscaler", module + "/pkg/app"}

// isController reports whether pkg is one of controllerPackages.
func isController(pkg string) bool { return slices.Contains(controllerPackages, pkg) }

// isClient reports whether pkg talks to an API server or watches it:
// client-go, or the generated clientset, informers, listers and apply
// configurations.
func isClient(pkg string) bool {
	return pkg == "k8s.io/client-go" || strings.HasPrefix(pkg, "k8s.io/client-go/") ||
		strings.HasPrefix(pkg, module+"/pkg/generated/")
}

// importGraph is every package that patterns build from, each with the
// packages it imports.
type importGraph map[string][]string

// listImports asks the go command for the import graph of patterns (test
// files left out, as in a build).
func listImports(t *testing.T, patterns ...string) importGraph {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the imports: %v", err)
	}
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, patterns...)
	var stderr bytes.Buffer
	cmd := exec.Command(goTool, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	g := importGraph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	if len(g) == 0 {
		t.Fatalf("go %s listed no package", strings.Join(args, " "))
	}
	return g
}

// violations lists each package of g that bad matches and that a package
// bad does not match imports, with those importers: the imports to remove.
// What the bad packages import in turn goes unsaid.
func (g importGraph) violations(bad func(string) bool) []string {
	var out []string
	for pkg := range g {
		if !bad(pkg) {
			continue
		}
		var importers []string
		for from, imports := range g {
			if !bad(from) && slices.Contains(imports, pkg) {
				importers = append(importers, from)
			}
		}
		if len(importers) > 0 {
			slices.Sort(importers)
			out = append(out, pkg+" (imported by "+strings.Join(importers, ", ")+")")
		}
	}
	slices.Sort(out)
	return out
}

func TestImports(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		bad      func(string) bool
	}{{
		name:     "the plan imports no client and no controller",
		patterns: []string{module + "/pkg/setplan"},
		bad:      func(pkg string) bool { return isClient(pkg) || isController(pkg) },
	}, {
		name:     "the replay imports no controller",
		patterns: []string{module + "/pkg/replay/..."},
		bad:      isController,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := listImports(t, tc.patterns...)
			if _, ok := g[strings.TrimSuffix(tc.patterns[0], "/...")]; !ok {
				t.Fatalf("%s is not in its own import graph", tc.patterns[0])
			}
			for _, v := range g.violations(tc.bad) {
				t.Errorf("%s imports %s", strings.Join(tc.patterns, " "), v)
			}
		})
	}
}

// The rules themselves, on made-up graphs: a rule that matched nothing
// would pass every real graph.
func TestImportRules(t *testing.T) {
	const (
		setplan = module + "/pkg/setplan"
		replay  = module + "/pkg/replay"
		lister  = module + "/pkg/generated/listers/gputask/v1"
		cache   = "k8s.io/client-go/tools/cache"
		field   = "k8s.io/apimachinery/pkg/util/validation/field"
	)
	bad := func(pkg string) bool { return isClient(pkg) || isController(pkg) }
	tests := []struct {
		name string
		g    importGraph
		want []string
	}{{
		name: "pure",
		g:    importGraph{setplan: {field, module + "/pkg/podspec"}, module + "/pkg/podspec": {field}, field: nil},
	}, {
		name: "client-go imported directly",
		g:    importGraph{setplan: {field, cache}, field: nil, cache: nil},
		want: []string{cache + " (imported by " + setplan + ")"},
	}, {
		name: "a generated lister",
		g:    importGraph{setplan: {lister}, lister: {cache}, cache: nil},
		want: []string{lister + " (imported by " + setplan + ")"},
	}, {
		name: "each controller package, named by what imports it",
		g: importGraph{
			replay: {module + "/pkg/replay/report", module + "/pkg/app"}, module + "/pkg/replay/report": {module + "/pkg/taskset"},
			module + "/pkg/app": {module + "/pkg/autoscaler", module + "/pkg/taskset"}, module + "/pkg/autoscaler": {cache},
			module + "/pkg/taskset": {cache}, cache: nil,
		},
		want: []string{
			module + "/pkg/app (imported by " + replay + ")",
			module + "/pkg/taskset (imported by " + module + "/pkg/replay/report)",
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.g.violations(bad); !slices.Equal(got, tc.want) {
				t.Errorf("violations() = %q, want %q", got, tc.want)
			}
		})
	}
}
