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
//	telegram   text messages queued on a fake Bot API (telegramtest) that
//	           the platform long-polls (getUpdates answers of up to 100), a
//	           private chat per tenant from one user: each tenant one
//	           sequential source; latency runs from the enqueue to the read.
//	idle       no events: connect the gateways and measure the connection cost.
//
// -store embedded or -store redis (with -redis-url) runs the in-process
// relay on that durable store backend, after the same load on the memory
// store, and prints the backend's figures as ratios to memory's.
//
// -connector runs real connector processes instead (the binary at that
// path, -instances of them on the Redis at -redis-url), with the gateways
// in -clients processes, so that a run of 100,000 gateways keeps every
// process under an open-file limit of 20,000; it measures memory per
// gateway in each connector process and in Redis, the connect rate, the
// idle CPU and one event to every tenant, and the same connections on as
// many bare echo server processes (procs.go).
//
// Examples:
//
//	relaybench -gateways 1000 -tenants 100 -rate 5000 -duration 10s
//	relaybench -driver nexscope -gateways 100 -rate 0 -duration 10s
//	relaybench -driver discord -gateways 100 -rate 500 -duration 10s
//	relaybench -driver slack -gateways 100 -rate 500 -duration 10s
//	relaybench -driver whatsapp -gateways 100 -rate 0 -duration 10s
//	relaybench -driver telegram -gateways 1 -rate 0 -duration 5s -echo=false -store embedded
//	relaybench -gateways 100 -rate 0 -duration 5s -producers 256 -store embedded
//	relaybench -url ws://10.0.0.5:8080/relay -secret S -gateway-prefix bench-gw- -gateways 100 -driver idle
//	relaybench -driver idle -connector ./connector -redis-url redis://127.0.0.1:6390/0 -instances 7 -gateways 100000 -tenants 1000
package main

import (
	"os"
)

// roleEnv selects the process's role: "fleet" runs the gateway side for a
// parent relaybench (see fleetMain), "echo-server" an echo server process
// (see echoServerMain).
const roleEnv = "RELAYBENCH_ROLE"

func main() {
	os.Exit(roleMain(os.Args[1:]))
}

// roleMain runs the process's role.
func roleMain(args []string) int {
	switch os.Getenv(roleEnv) {
	case roleFleet:
		return fleetMain(args, os.Stdin, os.Stdout, os.Stderr)
	case roleEchoServer:
		return echoServerMain(args, os.Stdin, os.Stdout, os.Stderr)
	}
	return benchMain(args, os.Stdout, os.Stderr)
}
