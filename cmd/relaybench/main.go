// Command relaybench measures the connector's gateway path under load and
// compares it with the bare WebSocket transport on the same machine.
//
// It runs the connector in-process (the relay and the driver's platform on a
// loopback listener, wired as cmd/connector's serve wires them) or targets a
// running connector with -url, connects N gateways with real HMAC upgrade
// tokens, drives events through a platform at a given rate, and prints
// throughput, p50/p90/p99/max latency (platform receipt to the gateway
// reading the inbound frame), errors, and the connector's memory per idle
// gateway connection. Every run then repeats the same load against a bare
// coder/websocket echo server, and prints the connector as a ratio of it.
//
// The gateways (and the echo clients) run in a child process, this binary
// re-executed with RELAYBENCH_ROLE=fleet, so the connector's process holds
// only the connector and its memory per connection can be read from
// runtime.MemStats. Gateways acknowledge every inbound (inbound_ack), as the
// Hermes gateway does.
//
// Drivers:
//
//	synthetic  deliveries published straight onto the relay's sink by a test
//	           platform (in-process only): the relay alone.
//	nexscope   members of nexscope rooms (one room per tenant, bound to it)
//	           sending msgs addressed to the bot over real WebSockets; latency
//	           runs from the member's send to the gateway's read.
//	discord    signed Ed25519 slash-command interactions POSTed to
//	           /discord/interactions (one guild per tenant), with a fake
//	           Discord (discordtest) for REST and the platform's Gateway
//	           session; latency runs from the scheduled POST to the read.
//	slack      signed Events API message events mentioning the bot POSTed
//	           to /slack/events (a workspace per tenant, installed through
//	           the OAuth flow first; a thread per user), with a fake Slack
//	           (slacktest) for the Web API; latency runs from the scheduled
//	           POST to the read.
//	idle       no events: connect the gateways and measure the connection cost.
//
// -store embedded or -store redis (with -redis-url) runs the in-process
// relay on that durable store backend, after the same load on the memory
// store, and prints the backend's figures as ratios to memory's.
//
// Examples:
//
//	relaybench -gateways 1000 -tenants 100 -rate 5000 -duration 10s
//	relaybench -driver nexscope -gateways 100 -rate 0 -duration 10s
//	relaybench -driver discord -gateways 100 -rate 500 -duration 10s
//	relaybench -driver slack -gateways 100 -rate 500 -duration 10s
//	relaybench -driver whatsapp -gateways 100 -rate 0 -duration 10s
//	relaybench -gateways 100 -rate 0 -duration 5s -producers 256 -store embedded
//	relaybench -url ws://10.0.0.5:8080/relay -secret S -gateway-prefix bench-gw- -gateways 100 -driver idle
package main

import (
	"os"
)

// roleEnv selects the process's role: "fleet" runs the gateway side for a
// parent relaybench (see fleetMain).
const roleEnv = "RELAYBENCH_ROLE"

func main() {
	if os.Getenv(roleEnv) == roleFleet {
		os.Exit(fleetMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(benchMain(os.Args[1:], os.Stdout, os.Stderr))
}
