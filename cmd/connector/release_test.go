package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReleaseBuildEmbedsTheChangelogsVersion: the release build commands of
// the README and the deploy guide, and the Dockerfile's example, embed the
// newest version of CHANGELOG.md, and a binary built that way says so.
func TestReleaseBuildEmbedsTheChangelogsVersion(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	m := regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+) `).FindStringSubmatch(read("CHANGELOG.md"))
	if m == nil {
		t.Fatal("CHANGELOG.md has no released version")
	}
	version := m[1]
	for path, re := range map[string]string{
		"README.md":                     `-X main\.buildVersion=(v[0-9.]+)`,
		"docs/guides/deploy.md":         `-X main\.buildVersion=(v[0-9.]+)|VERSION=(v[0-9.]+)`,
		"deploy/Dockerfile":             `VERSION=(v[0-9.]+)`,
		"docs/guides/upgrade-backup.md": `connector version`,
	} {
		found := regexp.MustCompile(re).FindAllStringSubmatch(read(path), -1)
		if len(found) == 0 {
			t.Errorf("%s has no release build command", path)
		}
		for _, f := range found {
			if v := strings.Join(f[1:], ""); v != "" && v != version {
				t.Errorf("%s builds %s, CHANGELOG.md's newest version is %s", path, v, version)
			}
		}
	}
	bin := filepath.Join(t.TempDir(), "connector")
	build := exec.Command("go", "build", "-ldflags", "-X main.buildVersion="+version+" -X main.buildCommit=0123abc", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "connector "+version+"\ncommit 0123abc\n") {
		t.Fatalf("connector version: %v\n%s", err, out)
	}
}
