package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"connector/internal/doctabletest"
)

// TestReadmeLayoutNamesEveryPackage: the README's layout table names every
// package of the module: in a row, or by its last element in the row of
// its parent (storetest in store's row).
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	rows, err := doctabletest.Rows("../../README.md", "## Layout")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{} // package path -> its row
	code := regexp.MustCompile("`([a-z0-9/]+)`")
	for _, r := range rows {
		for _, m := range code.FindAllStringSubmatch(r[0], -1) {
			listed[m[1]] = strings.Join(r, " ")
		}
	}
	root := filepath.Join("..", "..")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		pkg, _ := filepath.Rel(root, filepath.Dir(path))
		if _, ok := listed[pkg]; ok {
			return nil
		}
		parent, name := filepath.Dir(pkg), filepath.Base(pkg)
		for _, row := range listed { // named in a row, or by its name in its parent's
			if strings.Contains(row, "`"+pkg+"`") || (strings.Contains(row, "`"+parent+"`") && strings.Contains(row, "`"+name+"`")) {
				return nil
			}
		}
		t.Errorf("README's layout table does not name %s", pkg)
		listed[pkg] = "reported"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeCommandsUseFilesOfTheRepository: the paths the README's
// commands read are in a clone, not beside it.
func TestReadmeCommandsUseFilesOfTheRepository(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if strings.Contains(readme, "../shared") {
		t.Error("the README points outside the repository (../shared)")
	}
	for _, m := range regexp.MustCompile(`go run ./cmd/connector conformance \w+ (\S+)`).FindAllStringSubmatch(readme, -1) {
		if _, err := os.Stat(filepath.Join("..", "..", m[1])); err != nil {
			t.Errorf("the README's conformance command reads %s: %v", m[1], err)
		}
	}
	if !strings.Contains(readme, "Go 1.26.8 or newer") {
		t.Error("the README does not say which Go it needs")
	}
}
