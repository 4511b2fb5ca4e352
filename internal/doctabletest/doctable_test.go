package doctabletest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Doc\n\n## Other\n\n| a | b |\n|---|---|\n| x | y |\n\n## Wanted\n\nText.\n\n" +
		"| knob | value |\n|:---|---:|\n| `k1` | `{a: 1}` |\n| `k2` | pipe \\| inside |\n\nAfter.\n\n| next | table |\n|---|---|\n| z | z |\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := Rows(path, "## Wanted")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"`k1`", "`{a: 1}`"}, {"`k2`", "pipe | inside"}}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("rows = %q, want %q", rows, want)
	}
	if Code(rows[0][1]) != "{a: 1}" || Code("no code") != "" {
		t.Fatalf("Code: %q", Code(rows[0][1]))
	}
	if _, err := Rows(path, "## Missing"); err == nil {
		t.Fatal("a missing heading is not an error")
	}
}

func TestCheckDefaults(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "limits.md")
	if err := os.WriteFile(doc, []byte("## Limits\n\n| limit | default | set by | wire |\n|---|---|---|---|\n"+
		"| a | 10 s | `x.read_timeout` | - |\n"+
		"| b | 64 MiB per tenant, 1,024 conns | `x.buffer_bytes`, `x.max_conns` | - |\n"+
		"| c | 160 | `x.limit` | - |\n"+
		"| d | 1 | `x.missing` and `y.other` | - |\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := struct {
		ReadTimeout time.Duration
		BufferBytes int64 `yaml:"buffer_bytes"`
		Conns       int   `yaml:"max_conns"`
		Limit       int
	}{10 * time.Second, 64 << 20, 1024, 16}
	n, errs := CheckDefaults(doc, "## Limits", "x", &cfg)
	if n != 4 {
		t.Errorf("%d keys checked, want 4", n)
	}
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "x.limit is 16") || !strings.Contains(errs[1].Error(), "x.missing names no") {
		t.Errorf("errors %v, want x.limit's 16 not found in 160 and x.missing unknown", errs)
	}
}

func TestFormatDefault(t *testing.T) {
	for _, tc := range []struct {
		key  string
		v    any
		want string
	}{
		{"idle_timeout", 60 * time.Second, "60 s"},
		{"buffer_max_age", 7 * 24 * time.Hour, "168 h"},
		{"x", 10 * time.Minute, "10 min"},
		{"max_header_bytes", 64 << 10, "64 KiB"},
		{"max_payload", int64(10 << 20), "10 MiB"},
		{"buffer_entries", 10_000, "10,000"},
		{"max_conns", 16, "16"},
	} {
		if got := FormatDefault(tc.key, tc.v); got != tc.want {
			t.Errorf("FormatDefault(%s, %v) = %q, want %q", tc.key, tc.v, got, tc.want)
		}
	}
}
