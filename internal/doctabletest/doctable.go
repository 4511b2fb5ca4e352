// Package doctabletest reads the rows of a Markdown table from a document, so a
// test can check that a table in docs/ and the test's own cases name the
// same things.
package doctabletest

import (
	"fmt"
	"os"
	"strings"
)

// Rows returns the cells of every body row of the first table after the
// line heading (a Markdown heading line such as "## Discord"), trimmed,
// with "\|" unescaped. The header and separator rows are skipped.
func Rows(path, heading string) ([][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == heading {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%s: no heading %q", path, heading)
	}
	var rows [][]string
	inTable := false
	for _, l := range lines[start:] {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			if strings.HasPrefix(l, "#") {
				break
			}
			continue
		}
		if !inTable {
			inTable = true
			continue // header row
		}
		cells := splitRow(l)
		if len(cells) > 0 && strings.Trim(cells[0], "-: ") == "" {
			continue // separator row
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no table rows under %q", path, heading)
	}
	return rows, nil
}

// splitRow splits "| a | b \| c |" into ["a", "b | c"].
func splitRow(l string) []string {
	l = strings.TrimSuffix(strings.TrimPrefix(l, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(l); i++ {
		switch {
		case l[i] == '\\' && i+1 < len(l) && l[i+1] == '|':
			cur.WriteByte('|')
			i++
		case l[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(l[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// Code returns the text of the first `code span` in cell, or "" when it
// has none.
func Code(cell string) string {
	_, rest, ok := strings.Cut(cell, "`")
	if !ok {
		return ""
	}
	code, _, ok := strings.Cut(rest, "`")
	if !ok {
		return ""
	}
	return code
}
