package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestSynopsis(t *testing.T) {
	for text, want := range map[string]string{
		"Package x does y. It also does z.\n":    "Package x does y.",
		"Package x does y\nover two lines.\n":    "Package x does y over two lines.",
		"Package x does y:\n\n\tgo run ./x\n":    "Package x does y:",
		"Copyright 2026.\n\nPackage x does y.\n": "",
		"":                                       "",
	} {
		if got := Synopsis(text); got != want {
			t.Errorf("Synopsis(%q) = %q, want %q", text, got, want)
		}
	}
}

func TestOrder(t *testing.T) {
	dirs := []string{"test", "pkg/replay/engine", "pkg/replay-x", ".", "pkg/replay", "cmd/a", "pkg"}
	sort.Slice(dirs, func(i, j int) bool { return less(dirs[i], dirs[j]) })
	want := []string{".", "cmd/a", "pkg", "pkg/replay", "pkg/replay/engine", "pkg/replay-x", "test"}
	if !slices.Equal(dirs, want) {
		t.Errorf("order = %v, want %v", dirs, want)
	}
}

// write makes the files of files (path → content) under a new directory.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestPackages: every directory with Go source is a line, whatever its
// build tags; the comment is the non-test files', doc.go first, else a
// test file's; generated packages share one line; testdata and hidden
// directories are no packages.
func TestPackages(t *testing.T) {
	root := write(t, map[string]string{
		"main.go":                     "// Command app runs it.\npackage main\n",
		"controller.go":               "package main\n",
		"pkg/a/a.go":                  "// Package a is not the doc.go comment.\npackage a\n",
		"pkg/a/doc.go":                "// Package a does A.\npackage a\n",
		"pkg/a/a_test.go":             "// Package a is tested.\npackage a\n",
		"pkg/b/b.go":                  "//go:build linux\n\n// Package b does B on Linux. More.\npackage b\n",
		"pkg/none/none.go":            "package none\n",
		"pkg/generated/x/x.go":        "package x\n",
		"pkg/generated/y/y.go":        "package y\n",
		"pkg/a/testdata/t.go":         "package t\n",
		".git/x.go":                   "package x\n",
		"test/e2e/main_test.go":       "// Package e2e runs it all.\npackage e2e\n",
		"test/e2e/x_test.go":          "package e2e\n",
		"test/ext/ext_test.go":        "// Package ext_test says nothing of ext.\npackage ext_test\n",
		"test/ext/helpers.go":         "package ext\n",
		"test/onlyext/ext_test.go":    "package onlyext_test\n",
		"hack/tools/kueue/tools.go":   "//go:build tools\n\n// Package tools records Kueue.\npackage tools\n",
		"docs/not-go.md":              "# nothing\n",
		"pkg/generated/x/x_extra.go":  "package x\n",
		"pkg/a/ignored/README.md":     "no Go here\n",
		"pkg/a/sub/sub.go":            "// Package sub does S.\npackage sub\n",
		"pkg/a/sub/sub_linux_test.go": "package sub\n",
		"cmd/tool/main.go":            "// Command tool does T.\npackage main\n",
		"cmd/tool/main_test.go":       "package main\n",
	})
	pkgs, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	got := Render(pkgs)
	want := "| Where | What it is for |\n|---|---|\n" +
		"| root: `controller.go`, `main.go` | Command app runs it. |\n" +
		"| `cmd/tool` | Command tool does T. |\n" +
		"| `hack/tools/kueue` | Package tools records Kueue. |\n" +
		"| `pkg/a` | Package a does A. |\n" +
		"| `pkg/a/sub` | Package sub does S. |\n" +
		"| `pkg/b` | Package b does B on Linux. |\n" +
		"| `pkg/generated` | " + generatedDoc + " |\n" +
		"| `pkg/none` | (no package comment) |\n" +
		"| `test/e2e` | Package e2e runs it all. |\n" +
		"| `test/ext` | (no package comment) |\n"
	if got != want {
		t.Errorf("Render =\n%s\nwant\n%s", got, want)
	}
}

func TestSplice(t *testing.T) {
	file := "# Title\n\nBefore.\n\n" + Begin + "\nold map\n" + End + "\n\nAfter.\n"
	got, err := Splice([]byte(file), "new map\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Title\n\nBefore.\n\n" + Begin + "\nnew map\n" + End + "\n\nAfter.\n"; string(got) != want {
		t.Errorf("Splice =\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []string{"no markers\n", Begin + "\nonly the first\n", End + "\n" + Begin + "\n"} {
		if _, err := Splice([]byte(bad), "x\n"); err == nil {
			t.Errorf("Splice(%q) accepted a file without a pair of markers", bad)
		}
	}
}

// TestEveryGoListPackageIsOnTheMap: the walk finds at least every package
// the go command builds, with every build tag the repository uses.
func TestEveryGoListPackageIsOnTheMap(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-e", "-tags", "realnode,image,tools", "-f", "{{.Dir}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	onMap := map[string]bool{}
	for _, p := range pkgs {
		onMap[p.Dir] = true
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, Generated+"/") {
			rel = Generated
		}
		if !onMap[rel] {
			t.Errorf("go list has %s; the map does not", rel)
		}
	}
}
