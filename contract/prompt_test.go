package contract

import (
	"strings"
	"testing"
)

func TestPromptTokenRoundTrip(t *testing.T) {
	tok, err := PromptToken("a1b2c3.0000beef", "once")
	if err != nil || tok != "hp1:a1b2c3.0000beef:once" {
		t.Fatalf("token = %q %v", tok, err)
	}
	p, o, ok := ParsePromptToken(tok)
	if !ok || p != "a1b2c3.0000beef" || o != "once" {
		t.Fatalf("parse = %q %q %v", p, o, ok)
	}
}

func TestPromptTokenRejects(t *testing.T) {
	long := strings.Repeat("a", 32)
	for _, c := range []struct{ prompt, option string }{
		{"", "once"}, {"p", ""}, {"p:q", "once"}, {"p", "on ce"}, {strings.Repeat("a", 33), "x"},
		{"p", "ü"}, {long, long}, // 4+32+1+32 = 69 bytes: over the 64-byte cap
	} {
		if tok, err := PromptToken(c.prompt, c.option); err == nil {
			t.Errorf("PromptToken(%q, %q) = %q, want an error", c.prompt, c.option, tok)
		}
	}
	for _, data := range []string{
		"", "hp1:", "hp1::", "hp1:p", "hp1:p:", "hp1::o", "hp2:p:o", "HP1:p:o", "/approve", "hp1:p:o:x",
		"hp1:p q:o", "hp1:" + strings.Repeat("a", 60) + ":o",
	} {
		if p, o, ok := ParsePromptToken(data); ok {
			t.Errorf("ParsePromptToken(%q) = %q %q, want foreign", data, p, o)
		}
	}
}

func TestPromptButtons(t *testing.T) {
	a := &Action{Op: OpPrompt, Content: "Run rm -rf build?", PromptID: "n1.00000001",
		Options: []PromptOption{{ID: "once", Label: "Allow once", Style: StylePrimary}, {ID: "deny", Label: "Deny", Style: StyleDanger}}}
	bs, err := PromptButtons(a, 25)
	if err != nil || len(bs) != 2 || bs[1].Token != "hp1:n1.00000001:deny" || bs[0].Label != "Allow once" {
		t.Fatalf("buttons = %+v %v", bs, err)
	}
	bad := []func(*Action){
		func(a *Action) { a.Content = " " },
		func(a *Action) { a.Options = nil },
		func(a *Action) { a.Options = append(a.Options, a.Options[0]) },
		func(a *Action) { a.Options[0].Label = "" },
		func(a *Action) { a.PromptID = "bad id" },
		func(a *Action) {
			a.Options = append(a.Options, PromptOption{ID: "x", Label: "x"}, PromptOption{ID: "y", Label: "y"})
		},
	}
	for i, mutate := range bad {
		c := *a
		c.Options = append([]PromptOption(nil), a.Options...)
		mutate(&c)
		if _, err := PromptButtons(&c, 3); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
}

func FuzzParsePromptToken(f *testing.F) {
	f.Add("hp1:a1b2c3.0000beef:once")
	f.Add("hp1::")
	f.Fuzz(func(t *testing.T, data string) {
		p, o, ok := ParsePromptToken(data)
		if !ok {
			return
		}
		tok, err := PromptToken(p, o)
		if err != nil || tok != data {
			t.Fatalf("parsed %q into %q %q, which re-encode as %q %v", data, p, o, tok, err)
		}
	})
}
