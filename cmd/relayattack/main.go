// Command relayattack reproduces abuse of /relay by an authenticated gateway
// against an in-process relay on loopback, and prints what it costs the
// connector.
//
// The relay runs in this process; the attacking gateway runs in a child
// process (this binary re-executed with RELAYATTACK_ROLE=attacker), so the
// open file descriptors and goroutines printed are the connector's alone.
// Every mode is bounded in count and time and only dials 127.0.0.1.
//
// Modes:
//
//	burst     -conns connections of one gateway id, dialed as fast as
//	          possible; a -silent share of them never read (not even the
//	          close frame). The relay allows -limit per gateway id. Printed
//	          every second while the connections are held, and once after
//	          the attacker is gone: the gateway connections the relay serves
//	          (and the most it ever served at once), open fds and
//	          goroutines; then how each attacking connection ended, and
//	          the log bytes and lines per connection.
//	logflood  one gateway sends -bytes of small frames the relay skips
//	          (malformed JSON, unknown types, outbound without requestId,
//	          interrupt without session_key, acks of unknown bufferIds), or
//	          with -frame one kind of them or a valid frame repeated without
//	          end (hello, going_idle); printed: the log bytes and lines the
//	          relay wrote (at -log-level, in JSON as cmd/connector writes by
//	          default) per frame.
//
// Examples:
//
//	relayattack -mode burst -conns 2000 -silent 1
//	relayattack -mode burst -conns 300 -silent 0 -hold 5s
//	relayattack -mode logflood -bytes 5242880 -frame outbound
package main

import (
	"os"
)

// roleEnv selects the process's role: "attacker" runs the gateway side for
// a parent relayattack (see attackerMain).
const roleEnv = "RELAYATTACK_ROLE"

func main() {
	if os.Getenv(roleEnv) == roleAttacker {
		os.Exit(attackerMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(parentMain(os.Args[1:], os.Stdout, os.Stderr))
}
