package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"testing"
)

// rootLayers are the files of the GPUTask controller from the top down:
// main wires it, controller.go reads and plans (syncHandler), sync.go acts
// on the plan, status.go writes the status. A file calls into the files
// below it, never into those above.
var rootLayers = []string{"main.go", "controller.go", "sync.go", "status.go"}

// parseLayers parses rootLayers.
func parseLayers(t *testing.T) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	files := make([]*ast.File, len(rootLayers))
	for i, name := range rootLayers {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	return files
}

// calledName is the name of the function or method call calls, when it is
// a plain function (f(...)) or a method of the controller (c.f(...)).
func calledName(call *ast.CallExpr) (string, bool) {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name, true
	case *ast.SelectorExpr:
		if recv, ok := fn.X.(*ast.Ident); ok && recv.Name == "c" {
			return fn.Sel.Name, true
		}
	}
	return "", false
}

// TestNoFileCallsUp: status.go computes and writes the status from what
// the sync read and what acting found out, and sync.go acts on the plan;
// neither reaches back into a file above it for more.
func TestNoFileCallsUp(t *testing.T) {
	files := parseLayers(t)
	declaredIn := map[string]int{}
	for i, f := range files {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok {
				declaredIn[fn.Name.Name] = i
			}
		}
	}
	for i, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if name, ok := calledName(call); ok {
				if at, declared := declaredIn[name]; declared && at < i {
					t.Errorf("%s calls %s, which %s declares: a file may call only into the files below it", rootLayers[i], name, rootLayers[at])
				}
			}
			return true
		})
	}
}

// TestPlanIsFinal: the plan is final once taskplan.Make returns it. What
// acting finds out goes into the sync's outcome, so nothing assigns to the
// plan but the one assignment in syncHandler: not through s.plan, nor
// through a pointer to it (p := &s.plan, or a *taskplan.Plan parameter).
func TestPlanIsFinal(t *testing.T) {
	files := parseLayers(t)
	made := 0
	for i, f := range files {
		aliases := planPointers(f)
		// isPlan reports whether e is the plan or a part of it (s.plan,
		// s.plan.Memory.Replacement, p.Status where p points to it...).
		var isPlan func(e ast.Expr) bool
		isPlan = func(e ast.Expr) bool {
			switch x := e.(type) {
			case *ast.Ident:
				return aliases[x.Name]
			case *ast.SelectorExpr:
				return x.Sel.Name == "plan" || isPlan(x.X)
			case *ast.IndexExpr:
				return isPlan(x.X)
			case *ast.StarExpr:
				return isPlan(x.X)
			case *ast.ParenExpr:
				return isPlan(x.X)
			}
			return false
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.AssignStmt:
				for j, lhs := range x.Lhs {
					if x.Tok == token.DEFINE || !isPlan(lhs) {
						continue
					}
					if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "plan" && len(x.Rhs) == len(x.Lhs) && isMake(x.Rhs[j]) {
						made++
						continue
					}
					t.Errorf("%s: %s changes the plan after it is made; record what acting finds out in the outcome",
						rootLayers[i], types.ExprString(lhs))
				}
			case *ast.IncDecStmt:
				if isPlan(x.X) {
					t.Errorf("%s: %s changes the plan after it is made", rootLayers[i], types.ExprString(x.X))
				}
			}
			return true
		})
	}
	if made != 1 {
		t.Errorf("the plan is made %d times, want once (taskplan.Make in syncHandler)", made)
	}
}

// planPointers are the names that point to a plan in f: variables defined
// as &x.plan, and parameters of type *taskplan.Plan.
func planPointers(f *ast.File) map[string]bool {
	names := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.AssignStmt:
			for j, rhs := range x.Rhs {
				u, ok := rhs.(*ast.UnaryExpr)
				if !ok || u.Op != token.AND || j >= len(x.Lhs) {
					continue
				}
				if sel, ok := u.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "plan" {
					if id, ok := x.Lhs[j].(*ast.Ident); ok {
						names[id.Name] = true
					}
				}
			}
		case *ast.Field:
			if types.ExprString(x.Type) == "*taskplan.Plan" {
				for _, id := range x.Names {
					names[id.Name] = true
				}
			}
		}
		return true
	})
	return names
}

// isMake reports whether e is a call of taskplan.Make.
func isMake(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "taskplan" && sel.Sel.Name == "Make"
}
