package nexscope

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"

	"connector/internal/doctabletest"
)

// TestCloseDoc: docs/nexscope.md's close table lists exactly the closes
// codes.go defines, one row per Close value (their codes as a multiset).
func TestCloseDoc(t *testing.T) {
	rows, err := doctabletest.Rows("../../docs/nexscope.md", "## Close and error codes")
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	for _, r := range rows {
		doc = append(doc, r[0])
	}
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || !isIdent(lit.Type, "Close") {
			return true
		}
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok || !isIdent(kv.Key, "Code") {
				continue
			}
			v, ok := kv.Value.(*ast.BasicLit)
			if !ok {
				t.Fatalf("codes.go: a Close code this test cannot read: %T", kv.Value)
			}
			code = append(code, v.Value)
		}
		return true
	})
	slices.Sort(doc)
	slices.Sort(code)
	if len(code) < 15 || !slices.Equal(doc, code) {
		t.Fatalf("docs/nexscope.md lists closes %v, codes.go defines %v", doc, code)
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
