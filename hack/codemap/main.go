// Command codemap writes the code map of docs/architecture.md from the
// package comments, so that the map changes only with the code. The map has
// one line for every Go package and command of the repository, quoting the
// first sentence of its package comment.
//
// It reads the package comments from the source (parsing every .go file's
// package clause, whatever its build tags, test files included), not from
// `go list`, so that packages behind build tags (test/node), test-only
// packages (test/e2e) and the tool modules of hack/tools are on the map
// too. The generated packages under pkg/generated share one line.
//
//	go run ./hack/codemap -write docs/architecture.md   # hack/update-codemap.sh
//	go run ./hack/codemap -check docs/architecture.md   # hack/verify-codemap.sh
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	write := flag.Bool("write", false, "rewrite the code map section of the file in place")
	check := flag.Bool("check", false, "fail if the code map section of the file is not what the source says")
	root := flag.String("root", ".", "the repository's root")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: codemap [-root dir] -write|-check FILE\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *write == *check || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*root, flag.Arg(0), *write); err != nil {
		fmt.Fprintln(os.Stderr, "codemap:", err)
		os.Exit(1)
	}
}

func run(root, file string, write bool) error {
	pkgs, err := Packages(root)
	if err != nil {
		return err
	}
	for _, p := range pkgs {
		if p.Doc == "" {
			fmt.Fprintf(os.Stderr, "codemap: warning: %s has no package comment\n", p.Dir)
		}
	}
	old, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	updated, err := Splice(old, Render(pkgs))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if bytes.Equal(old, updated) {
		return nil
	}
	if write {
		return os.WriteFile(file, updated, 0o644)
	}
	return fmt.Errorf("the code map in %s is out of date: run hack/update-codemap.sh\n%s", file, Diff(old, updated))
}
