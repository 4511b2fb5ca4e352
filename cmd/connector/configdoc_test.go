package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the Config struct")

// TestConfigurationDoc fails when docs/configuration.md and the Config
// struct disagree, so the reference cannot drift from the code.
func TestConfigurationDoc(t *testing.T) {
	want, err := configReference(configDocDirs)
	if err != nil {
		t.Fatal(err)
	}
	keepInStep(t, "docs/configuration.md", want, "the Config struct", "TestConfigurationDoc")
	for _, key := range []string{"`listen`", "`tenants[].gateways[].secrets`", "`discord.guilds`", "`telegram.chats`", "`nexscope.rooms[].tenant`"} {
		if !strings.Contains(want, key) {
			t.Errorf("reference lacks %s", key)
		}
	}
	for _, line := range strings.Split(want, "\n") {
		if strings.HasPrefix(line, "| `") && strings.HasSuffix(line, "|  |") {
			t.Errorf("undocumented key (add a doc comment to its field): %s", line)
		}
	}
}

// keepInStep fails the test when the repository's file doc (generated from
// source by the test named test) is not want; with -update it writes want
// there first.
func keepInStep(t *testing.T, doc, want, source, test string) {
	t.Helper()
	path := "../../" + doc
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it with -update)", err)
	}
	if string(got) != want {
		t.Fatalf("%s is out of date with %s; run\n\tgo test ./cmd/connector -run %s -update", doc, source, test)
	}
}
