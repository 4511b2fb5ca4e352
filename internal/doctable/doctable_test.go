package doctable

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
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
