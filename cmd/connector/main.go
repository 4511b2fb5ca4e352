// Command connector runs the edge service that lets many Hermes gateways
// share one Discord bot and one Telegram bot, and hosts nexscope rooms.
//
// Subcommands:
//
//	connector [serve] [-config FILE] [-listen ADDR] [-data-dir DIR] [-check]
//	connector conformance keys FILE     check session keys against a fixture
//	connector conformance events FILE   check platform normalization against a fixture
//	connector token -gateway-id ID -secret S [-ttl 300s]
//	connector version
//
// With no -config, serve runs on embedded defaults: loopback only, one local
// tenant whose gateway secret is generated and printed, and a nexscope room
// whose token is generated and printed; no Discord or Telegram credentials
// are needed. The generated secrets are kept in the data directory
// (-data-dir, $CONNECTOR_DATA_DIR, $XDG_STATE_HOME/connector or
// ~/.local/state/connector), so they stay the same across restarts; so is
// the embedded store, which keeps the inbound gateways have not
// acknowledged and interaction tokens across restarts.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "" || args[0][0] != '-') {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveCmd(args, stdout, stderr)
	case "conformance":
		return conformanceCmd(args, stdout, stderr)
	case "token":
		return tokenCmd(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "connector", version())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "connector: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}

const usage = `usage:
  connector [serve] [-config FILE] [-listen ADDR] [-data-dir DIR] [-check]
  connector conformance keys FILE
  connector conformance events FILE
  connector token -gateway-id ID -secret S [-ttl 300s]
  connector version
`

// version reports the module version or the VCS revision the binary was
// built from.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return "devel-" + rev + dirty
	}
	return "devel"
}
