package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// logMethods are the slog.Logger methods whose arguments after the message
// are key-value pairs (With has no message).
var logMethods = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"Log": 3, "With": 0,
}

// TestLogErrorKeyIsErr fails when any log call in the module's non-test
// code names an error attribute "error": one key, "err", everywhere, so a
// log query for failures finds them all.
func TestLogErrorKeyIsErr(t *testing.T) {
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			var keys []ast.Expr
			if isSlogCall(call) && len(call.Args) > 0 {
				keys = call.Args[:1] // slog.String("error", ...), slog.Any(...)
			} else if first, ok := logMethods[sel.Sel.Name]; ok {
				// Key-value pairs; an slog.Attr argument stands alone.
				for i := first; i < len(call.Args); i += 2 {
					if c, ok := call.Args[i].(*ast.CallExpr); ok && isSlogCall(c) {
						i--
						continue
					}
					keys = append(keys, call.Args[i])
				}
			}
			for _, k := range keys {
				if lit, ok := k.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, _ := strconv.Unquote(lit.Value); s == "error" {
						bad = append(bad, fset.Position(lit.Pos()).String())
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("log attributes named \"error\" (use \"err\"):\n%s", strings.Join(bad, "\n"))
	}
}

// isSlogCall reports whether call is slog.Something(...), e.g. slog.String.
func isSlogCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "slog"
}
