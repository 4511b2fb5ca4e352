package nexscope

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/coder/websocket"

	"connector/internal/doctable"
)

// TestCloseDoc: docs/nexscope.md's close table lists exactly the closes
// codes.go defines, one row per Close value (their codes as a multiset).
func TestCloseDoc(t *testing.T) {
	rows, err := doctable.Rows("../../docs/nexscope.md", "## Close and error codes")
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	for _, r := range rows {
		doc = append(doc, r[0])
	}
	statuses := map[string]websocket.StatusCode{
		"StatusPolicyViolation": websocket.StatusPolicyViolation,
		"StatusGoingAway":       websocket.StatusGoingAway,
		"StatusServiceRestart":  websocket.StatusServiceRestart,
		"StatusInternalError":   websocket.StatusInternalError,
		"StatusTryAgainLater":   websocket.StatusTryAgainLater,
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
			switch v := kv.Value.(type) {
			case *ast.BasicLit:
				code = append(code, v.Value)
			case *ast.SelectorExpr:
				s, ok := statuses[v.Sel.Name]
				if !ok {
					t.Fatalf("codes.go: close status %s is missing from this test", v.Sel.Name)
				}
				code = append(code, strconv.Itoa(int(s)))
			default:
				t.Fatalf("codes.go: a Close code this test cannot read: %T", v)
			}
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
