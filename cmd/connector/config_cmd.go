package main

import (
	"fmt"
	"io"
)

// configCmd prints configuration help: "example", a commented config file.
func configCmd(args []string, stdout, stderr io.Writer) int {
	const synopsis = "connector config example"
	sub := ""
	if len(args) > 0 && args[0] == "example" {
		sub, args = args[0], args[1:]
	}
	fs := newFlagSet("config", synopsis, "Prints a commented example config file (every key: docs/configuration.md).")
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if sub == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "usage: %s\n", synopsis)
		return 2
	}
	fmt.Fprint(stdout, exampleConfig)
	return 0
}
