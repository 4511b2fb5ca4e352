package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord"
	"connector/platform/nexscope"
	"connector/platform/slack"
	"connector/platform/telegram"
	"connector/platform/whatsapp"
	"connector/vault"
)

// TestContractDoc fails when docs/contract.md and the contract package
// disagree: frame types, ops, result codes and close codes must be the
// same sets in both, and the per-platform op columns must equal what each
// platform advertises.
func TestContractDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := markdownTables(string(doc))
	consts := contractConsts(t)

	firstColumn := func(heading string) []string {
		rows, ok := tables[heading]
		if !ok {
			t.Fatalf("docs/contract.md has no table under %q", heading)
		}
		var out []string
		for _, r := range rows {
			out = append(out, strings.Trim(r[0], "`"))
		}
		slices.Sort(out)
		return out
	}
	same := func(what string, doc, code []string) {
		t.Helper()
		slices.Sort(code)
		if !slices.Equal(doc, code) {
			t.Errorf("%s: docs/contract.md lists %v, the code has %v", what, doc, code)
		}
	}

	var gatewayTypes, connectorTypes []string
	for name, v := range consts {
		switch name {
		case "TypeHello", "TypeOutbound", "TypeInterrupt", "TypeGoingIdle", "TypeInboundAck":
			gatewayTypes = append(gatewayTypes, v)
		case "TypeDescriptor", "TypeInbound", "TypeOutboundResult", "TypeInterruptInbound", "TypeGoingIdleAck", "TypePassthroughForward":
			connectorTypes = append(connectorTypes, v)
		default:
			if strings.HasPrefix(name, "Type") {
				t.Errorf("frame type constant %s is in neither direction of this test", name)
			}
		}
	}
	same("gateway frames", firstColumn("Gateway → connector frames"), gatewayTypes)
	same("connector frames", firstColumn("Connector → gateway frames"), connectorTypes)
	same("ops", firstColumn("Ops"), slices.Clone(contract.Ops))
	same("result codes", firstColumn("Result codes"), prefixed(consts, "Code"))

	var closeDoc []string
	for _, r := range tables["Close codes"] {
		closeDoc = append(closeDoc, r[0]+" "+strings.Trim(r[1], "`"))
	}
	var closeCode []string
	for name, v := range consts {
		if strings.HasPrefix(name, "Close") {
			closeCode = append(closeCode, v+" "+name)
		}
	}
	slices.Sort(closeDoc)
	same("close codes", closeDoc, closeCode)

	// Per-platform columns: header "op | fields | discord | telegram |
	// nexscope | whatsapp_cloud | slack"; a mark may carry a footnote ("✓¹").
	for col, p := range docPlatforms(t) {
		d := p.Descriptor()
		var marked []string
		for _, r := range tables["Ops"] {
			if strings.HasPrefix(strings.TrimSpace(r[col]), "✓") {
				marked = append(marked, strings.Trim(r[0], "`"))
			}
		}
		slices.Sort(marked)
		same(p.Name()+" supported_ops", marked, slices.Clone(d.SupportedOps))
	}
}

// docPlatforms builds each platform (no network is touched) keyed by its
// column in the ops table.
func docPlatforms(t *testing.T) map[int]platform.Platform {
	deps := platform.Deps{Log: slog.New(slog.DiscardHandler), Vault: vault.NewMemory(vault.Config{})}
	d, err := discord.New(discord.Config{BotToken: "doc-test-token", ApplicationID: "1",
		PublicKey: strings.Repeat("ab", 32)}, deps)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := telegram.New(telegram.Config{BotToken: "123456:doc-test-token"}, deps)
	if err != nil {
		t.Fatal(err)
	}
	n, err := nexscope.New(nexscope.Config{Token: "doc-test-token"}, deps)
	if err != nil {
		t.Fatal(err)
	}
	w, err := whatsapp.New(whatsapp.Config{AppSecret: "doc-test-secret", VerifyToken: "doc-test-verify", AccessToken: "doc-test-token"}, deps)
	if err != nil {
		t.Fatal(err)
	}
	s, err := slack.New(slack.Config{SigningSecret: "doc-test-secret", BotToken: "xoxb-doc-test"}, deps)
	if err != nil {
		t.Fatal(err)
	}
	return map[int]platform.Platform{2: d, 3: tg, 4: n, 5: w, 6: s}
}

func prefixed(consts map[string]string, prefix string) []string {
	var out []string
	for name, v := range consts {
		if strings.HasPrefix(name, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// contractConsts returns every constant declared in package contract with a
// literal value, by name (string values unquoted).
func contractConsts(t *testing.T) map[string]string {
	files, _ := filepath.Glob("../../contract/*.go")
	out := make(map[string]string)
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
						v := lit.Value
						if lit.Kind == token.STRING {
							v, _ = strconv.Unquote(v)
						}
						out[name.Name] = v
					}
				}
			}
		}
	}
	return out
}

// markdownTables returns the body rows of the first table under each "## "
// heading, cells trimmed.
func markdownTables(doc string) map[string][][]string {
	out := make(map[string][][]string)
	heading := ""
	inTable := false
	for line := range strings.SplitSeq(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			heading, inTable = strings.TrimPrefix(line, "## "), false
		case strings.HasPrefix(line, "|"):
			if _, seen := out[heading]; seen && !inTable {
				continue // only the first table of a section
			}
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if !inTable {
				inTable = true
				out[heading] = nil // header row
				continue
			}
			if strings.HasPrefix(cells[0], "---") {
				continue
			}
			out[heading] = append(out[heading], cells)
		default:
			inTable = false
		}
	}
	return out
}

// TestOutboundResultsAreEveryCode: connector_outbound_ops_total's series
// are pre-created (preinit) for ok and every result code of the contract,
// so a code a platform answers reads 0 before its first answer instead of
// being absent.
func TestOutboundResultsAreEveryCode(t *testing.T) {
	codes := prefixed(contractConsts(t), "Code")
	slices.Sort(codes)
	got := slices.DeleteFunc(slices.Clone(outboundResults), func(r string) bool { return r == "ok" })
	slices.Sort(got)
	if !slices.Equal(got, codes) || !slices.Contains(outboundResults, "ok") {
		t.Fatalf("outboundResults %v, want ok and the contract's codes %v", outboundResults, codes)
	}
}

// TestContractDocNamesResultFields: the "Result codes" section of
// docs/contract.md names every field an outbound_result's result (and its
// chat_info) can carry, so a gateway author learns each one from it.
func TestContractDocNamesResultFields(t *testing.T) {
	doc, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Result codes\n")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, v := range []any{contract.Result{}, contract.ChatInfo{}} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if !strings.Contains(section, "`"+name+"`") {
				t.Errorf("docs/contract.md's Result codes section does not name %s's field `%s`", rt.Name(), name)
			}
		}
	}
}
