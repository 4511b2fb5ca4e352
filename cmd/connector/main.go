// Command connector runs the edge service that lets many Hermes gateways
// share one bot identity per chat platform, and hosts nexscope rooms.
// `connector help` lists its subcommands (each takes --help); with none it
// serves. Without -config, serve reads $CONNECTOR_CONFIG, else
// ./connector.yaml or /etc/connector/connector.yaml; with none of them it
// runs on embedded defaults: loopback only, one local tenant and a nexscope
// room, their secrets generated into the data directory (kept across
// restarts, docs/durability.md) and printed.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order help prints them.
var commands []command

func init() {
	commands = []command{
		{"serve", "run the connector until SIGINT or SIGTERM (the default command)", serveCmd},
		{"config", "print a commented example config file", configCmd},
		{"conformance", "check session keys or platform normalization against an oracle fixture", conformanceCmd},
		{"admin", "change tenants, gateways, secrets and bindings of a running connector (admin API)", adminCmd},
		{"token", "mint a gateway's upgrade token, reading the secret from $" + envTokenSecret + " or stdin", tokenCmd},
		{"health", "probe a running connector's /healthz (a container's HEALTHCHECK); exit 0 when it answers", healthCmd},
		{"version", "print the version, commit and Go version", versionCmd},
		{"help", "print this list", func(_ []string, stdout, _ io.Writer) int { printUsage(stdout); return 0 }},
	}
}

// run dispatches a command line and returns the process exit code. With no
// command, or flags first, it runs serve.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		printUsage(stdout)
		return 0
	}
	name := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(args, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "connector: unknown command %q\n\n", name)
	printUsage(stderr)
	return 2
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "connector: lets many Hermes gateways share one bot identity per chat platform (Discord, Telegram, Slack, WhatsApp Cloud), and hosts nexscope rooms.\n\n")
	fmt.Fprint(w, "usage: connector <command> [flags]   (no command: serve)\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun connector <command> --help for a command's flags.\n")
}

// parseFlags parses args into fs. It returns -1 when the command goes on;
// otherwise the exit code: 0 after printing fs's usage to stdout for
// --help, 2 after printing the error and usage to stderr.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	var out bytes.Buffer
	fs.SetOutput(&out)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = stdout.Write(out.Bytes())
		return 0
	case err != nil:
		_, _ = stderr.Write(out.Bytes())
		return 2
	}
	fs.SetOutput(stderr)
	return -1
}

// parseFlagsOnly is parseFlags for a command that takes no arguments
// besides its flags: one is a usage error (2).
func parseFlagsOnly(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "connector %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2
	}
	return -1
}

// newFlagSet returns a flag set whose usage starts with synopsis and a
// line saying what the command does.
func newFlagSet(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\n%s\n", synopsis, about)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(fs.Output(), "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// versionCmd prints the version, the commit and the Go version the binary
// was built with.
func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "connector version", "Prints the version, the commit and the Go version of this binary.")
	if code := parseFlagsOnly(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	d := readBuildDetails()
	fmt.Fprintf(stdout, "connector %s\ncommit %s\n%s\n", d.Version, d.Commit, d.GoVersion)
	return 0
}
