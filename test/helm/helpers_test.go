package helm

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gputask/gputask-controller/test/framework"
)

// runHelm runs bin/helm against the control plane.
func runHelm(ctx context.Context, args ...string) (string, error) {
	return cp.Helm(ctx, args...)
}

// helmT runs bin/helm and fails the test on error.
func helmT(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := runHelm(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderT runs `helm template` for the chart and returns what it renders.
func renderT(t *testing.T, release, namespace string, args ...string) string {
	t.Helper()
	return helmT(t, append([]string{"template", release, chartDir(), "--namespace", namespace}, args...)...)
}

func chartDir() string { return filepath.Join(cp.Root, "charts", "gputask-controller") }

// testdata is a file of testdata/; tests run in the package's directory.
func testdata(name string) string {
	return filepath.Join("testdata", name)
}

// parseObjects splits a multi-document YAML stream into objects, leaving out
// empty documents.
func parseObjects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("parsing the rendered manifests: %v", err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// findObject returns the only object of kind in objs whose name is name, or
// with name empty the only object of that kind.
func findObject(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s %q in the manifests, found %d (%s)", kind, name, len(found), describe(objs))
	}
	return found[0]
}

func objectsOfKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// into converts an unstructured object to its typed form.
func into[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("converting %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

// describe lists objects as kind/namespace/name, sorted.
func describe(objs []*unstructured.Unstructured) string {
	var names []string
	for _, o := range objs {
		names = append(names, objectName(o))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func objectName(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + "/" + ns + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetName()
}

// controllerFlags is what the controller binary's -help says of its flags:
// each flag's name and its default as printed ("" when it prints none, which
// is its zero value).
func controllerFlags(t *testing.T) map[string]string {
	t.Helper()
	bin, err := cp.ControllerBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// -help prints the usage and exits 0 (flag.ExitOnError); the usage goes
	// to stderr.
	out, err := exec.CommandContext(ctx, bin, "-help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -help: %v\n%s", bin, err, out)
	}
	flags := parseHelp(string(out))
	if len(flags) == 0 {
		t.Fatalf("no flags found in the output of %s -help:\n%s", bin, out)
	}
	return flags
}

var (
	// Go's flag package prints "  -name type" and the usage on the next
	// lines; pflag prints "      --name type   usage" on one line.
	helpFlagLine = regexp.MustCompile(`^\s{1,8}(?:-[a-zA-Z], )?--?([a-zA-Z0-9][-a-zA-Z0-9_.]*)\b`)
	helpDefault  = regexp.MustCompile(`\(default (.*)\)\s*$`)
)

func parseHelp(help string) map[string]string {
	flags := map[string]string{}
	current := ""
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		if m := helpFlagLine.FindStringSubmatch(line); m != nil && !strings.HasPrefix(strings.TrimLeft(line, " "), "\t") {
			current = m[1]
			flags[current] = ""
		}
		if current == "" {
			continue
		}
		if m := helpDefault.FindStringSubmatch(line); m != nil {
			value := m[1]
			if unquoted, err := strconv.Unquote(value); err == nil {
				value = unquoted
			}
			flags[current] = value
		}
	}
	return flags
}

// flagArgs splits "--name=value" (or "-name=value") arguments into name and
// value, in order; a flag without "=" has the value "true".
func flagArgs(t *testing.T, args []string) [][2]string {
	t.Helper()
	var out [][2]string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			t.Fatalf("argument %q is not a flag", a)
		}
		name, value, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok {
			value = "true"
		}
		out = append(out, [2]string{name, value})
	}
	return out
}

// sameFlagValue reports whether a flag value and a default printed by -help
// mean the same: "10m" and "10m0s", "50" and "50.0". An empty default is the
// flag's zero value.
func sameFlagValue(value, def string) bool {
	if value == def {
		return true
	}
	if def == "" {
		for _, zero := range []string{"0", "0s", "false", "[]"} {
			if value == zero {
				return true
			}
		}
		return false
	}
	if a, err := time.ParseDuration(value); err == nil {
		if b, err := time.ParseDuration(def); err == nil {
			return a == b
		}
	}
	if a, err := strconv.ParseFloat(value, 64); err == nil {
		if b, err := strconv.ParseFloat(def, 64); err == nil {
			return a == b
		}
	}
	if a, err := strconv.ParseBool(value); err == nil {
		if b, err := strconv.ParseBool(def); err == nil {
			return a == b
		}
	}
	return false
}

// requireHelm fails with "run make tools" when bin/helm is missing, as the
// framework does for the control plane's binaries.
func requireHelm(binDir string) error {
	return framework.CheckBinaries(binDir, framework.BinHelm)
}
