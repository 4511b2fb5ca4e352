// Command httpflood reproduces the connection-level abuse of issues 11 and 22 against
// a real connector binary and reports what it costs the connector: open
// file descriptors, goroutines and RSS before, under and after the attack,
// how many attack connections the connector closed by itself, and whether a
// real gateway can still connect while the attack runs. The attack
// connections all come from 127.0.0.1, the gateway probe from 127.0.0.2
// (another host, as the connector's per-source bound sees it).
//
// It starts the binary given with -connector as a child process on
// loopback (127.0.0.1, ports chosen by the kernel), with a generated config
// that fronts Discord interactions and a Telegram webhook (their APIs point
// at a closed loopback port, so nothing leaves the machine), optionally
// under a lowered open-file limit (-nofile, through prlimit). It reads the
// child's /proc/PID/fd and /proc/PID/status and its go_goroutines metric.
//
// Modes (-mode, comma-separated, run at once):
//
//	idle        -idle connections each send one keep-alive request, read
//	            the answer and then stay silent
//	slowbody    -slow POSTs to /discord/interactions and /telegram/webhook
//	            announce a 64 KiB body and trickle one byte every 5 s
//	slowheader  -slow requests whose headers are never finished
//	ledger      (alone) -readers gateway connections say hello for relay,
//	            read every inbound and acknowledge none, while -members
//	            nexscope members send -messages messages of -message-bytes
//	            (each its own thread, so its own session) to the tenant's
//	            bot; then the readers close, a gateway acknowledges
//	            what is still buffered, and memory (RSS, anonymous and
//	            file-backed, Go heap in use) is sampled every 15 s until
//	            -settle has passed
//	upgrade     (alone) issue 22's upgrade flood: -workers loops send GET
//	            /relay upgrades as fast as they are answered, without an
//	            Authorization header (-auth none) or with a token no
//	            gateway signed (-auth bad), at most -rate a second in
//	            all (0: no bound); an upgraded socket is held,
//	            never answering the close frame, until the connector
//	            closes it or -linger passes (at most -open at once); for
//	            -hold, while a gateway dials from 127.0.0.2 every 500 ms
//	            and the connector is sampled every 250 ms
//
// Everything is bounded: at most 5,000 connections per mode (10,000 open
// at once in the upgrade flood), -hold at most 5 minutes (the ledger and upgrade
// floods end at -hold), 2 GiB of flood messages; the tool closes its
// connections, stops the child and exits.
//
// Example (the figures of issue 11):
//
//	go build -o /tmp/connector ./cmd/connector
//	go run ./cmd/httpflood -connector /tmp/connector -mode idle,slowbody -idle 1000 -slow 300 -hold 75s
//	go run ./cmd/httpflood -connector /tmp/connector -mode idle -idle 600 -nofile 512 -hold 20s
//	go run ./cmd/httpflood -connector /tmp/connector -mode ledger -messages 818 -hold 5m -settle 3m
//
// and of issue 22:
//
//	go run ./cmd/httpflood -connector /tmp/connector -mode upgrade -auth none -rate 4100 -hold 10s -settle 20s -nofile 4096
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	os.Exit(attackMain(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the tool's flags.
type options struct {
	Connector string
	Legacy    bool
	Modes     []string
	Idle      int
	Slow      int
	Hold      time.Duration
	Settle    time.Duration
	NoFile    int
	// Readers, Messages and MessageBytes size the ledger attack.
	Readers      int
	Members      int
	Messages     int
	MessageBytes int
	// Workers, Rate, Auth, Linger and Open shape the upgrade flood.
	Workers int
	Rate    int
	Auth    string
	Linger  time.Duration
	Open    int
}

const (
	modeIdle       = "idle"
	modeSlowBody   = "slowbody"
	modeSlowHeader = "slowheader"
	modeLedger     = "ledger"
	modeUpgrade    = "upgrade"
	authNone       = "none"
	authBad        = "bad"
	maxConns       = 5000
	// maxOpen bounds the upgrade flood's sockets open at once.
	maxOpen = 10_000
	maxHold = 5 * time.Minute
	// maxFlood bounds the ledger attack's messages times their size.
	maxFlood = 2 << 30
)

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	var modes string
	fs := flag.NewFlagSet("httpflood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Connector, "connector", "", "path of the connector binary to attack (required)")
	fs.BoolVar(&o.Legacy, "legacy", false, "the binary predates the ops listener and http section: leave them out of its config")
	fs.StringVar(&modes, "mode", modeIdle+","+modeSlowBody, "attacks to run at once: idle, slowbody, slowheader; or ledger or upgrade alone")
	fs.IntVar(&o.Idle, "idle", 1000, "idle keep-alive connections (mode idle)")
	fs.IntVar(&o.Slow, "slow", 300, "slow requests (modes slowbody, slowheader)")
	fs.DurationVar(&o.Hold, "hold", 75*time.Second, "how long the attack holds its connections")
	fs.DurationVar(&o.Settle, "settle", 5*time.Second, "wait after the attack closed its connections before the last sample (ledger: sampled every 15s until then)")
	fs.IntVar(&o.NoFile, "nofile", 0, "open-file limit of the connector process (0: inherited)")
	fs.IntVar(&o.Readers, "readers", 3, "ledger: gateway connections that read every inbound and acknowledge none")
	fs.IntVar(&o.Members, "members", 4, "ledger: nexscope members sending the messages between them")
	fs.IntVar(&o.Messages, "messages", 818, "ledger: nexscope messages sent to the bot")
	fs.IntVar(&o.MessageBytes, "message-bytes", 900_000, "ledger: text bytes of each message (at most 900,000: the inbound frame must fit the gateway's 1 MiB)")
	fs.IntVar(&o.Workers, "workers", 256, "upgrade: loops sending upgrades at once")
	fs.IntVar(&o.Rate, "rate", 0, "upgrade: upgrades per second over all workers, at most 100000 (0: as fast as they are answered)")
	fs.StringVar(&o.Auth, "auth", authNone, "upgrade: none (no Authorization header) or bad (a token no gateway signed)")
	fs.DurationVar(&o.Linger, "linger", 5*time.Second, "upgrade: how long an upgraded socket is held at most, never answering the close")
	fs.IntVar(&o.Open, "open", maxOpen, "upgrade: attack sockets open at once, at most 10000")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.Modes = strings.Split(modes, ",")
	for _, m := range o.Modes {
		switch m {
		case modeIdle, modeSlowBody, modeSlowHeader:
		case modeLedger, modeUpgrade:
			if len(o.Modes) > 1 {
				return o, fmt.Errorf("-mode %s runs alone", m)
			}
		default:
			return o, fmt.Errorf("unknown -mode %q", m)
		}
	}
	switch {
	case o.Connector == "":
		return o, errors.New("-connector is required (go build -o /tmp/connector ./cmd/connector)")
	case o.Idle < 0 || o.Idle > maxConns || o.Slow < 0 || o.Slow > maxConns:
		return o, fmt.Errorf("-idle and -slow must be between 0 and %d", maxConns)
	case o.Hold <= 0 || o.Hold > maxHold:
		return o, fmt.Errorf("-hold must be positive and at most %s", maxHold)
	case o.Settle < 0 || o.Settle > maxHold:
		return o, fmt.Errorf("-settle must be between 0 and %s", maxHold)
	case o.Readers < 1 || o.Readers > 16:
		return o, errors.New("-readers must be between 1 and 16 (relay.max_conns_per_gateway)")
	case o.Members < 1 || o.Members > 40:
		return o, errors.New("-members must be between 1 and 40 (the room's cap is 50)")
	case o.Messages < 1 || o.MessageBytes < 1 || o.MessageBytes > 900_000 || int64(o.Messages)*int64(o.MessageBytes) > maxFlood:
		return o, fmt.Errorf("-messages and -message-bytes must be positive, -message-bytes at most 900000, and together at most %d bytes", maxFlood)
	case o.NoFile < 0:
		return o, errors.New("-nofile must not be negative")
	case o.Workers < 1 || o.Workers > maxConns:
		return o, fmt.Errorf("-workers must be between 1 and %d", maxConns)
	case o.Open < 1 || o.Open > maxOpen:
		return o, fmt.Errorf("-open must be between 1 and %d", maxOpen)
	case o.Rate < 0 || o.Rate > 100_000:
		return o, errors.New("-rate must be between 0 and 100000")
	case o.Auth != authNone && o.Auth != authBad:
		return o, fmt.Errorf("-auth must be %s or %s", authNone, authBad)
	case o.Linger <= 0 || o.Linger > time.Minute:
		return o, errors.New("-linger must be positive and at most 1m")
	}
	return o, nil
}

func attackMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "httpflood:", err)
		}
		return 2
	}
	raiseFileLimit()
	run := runAttack
	switch o.Modes[0] {
	case modeLedger:
		run = runLedger
	case modeUpgrade:
		run = runUpgradeFlood
	}
	if err := run(o, stdout); err != nil {
		fmt.Fprintln(stderr, "httpflood:", err)
		return 1
	}
	return 0
}

// runAttack starts the connector, samples it, attacks, and reports.
func runAttack(o options, w io.Writer) error {
	child, err := startChild(o)
	if err != nil {
		return err
	}
	defer child.stop()
	fmt.Fprintf(w, "connector pid %d on %s (metrics %s), open-file limit %s\n", child.pid(), child.addr, child.metricsURL, child.fileLimit())
	tbl := &table{w: w}
	tbl.header()
	tbl.row("baseline", child.sample(), "", "")

	a := newAttack(child.addr, o)
	opened := a.open()
	time.Sleep(2 * time.Second) // let the connector take in what was opened
	probe := probeGateway(child)
	tbl.row("under attack", child.sample(), a.status(opened), probe)

	time.Sleep(o.Hold)
	tbl.row(fmt.Sprintf("after %s", o.Hold), child.sample(), a.status(opened), probeGateway(child))

	a.close()
	time.Sleep(o.Settle)
	tbl.row("attack ended", child.sample(), "", probeGateway(child))
	if child.exited() {
		return errors.New("the connector exited during the attack; see its log above")
	}
	return nil
}

// table prints the samples as aligned columns.
type table struct{ w io.Writer }

func (t *table) header() {
	fmt.Fprintf(t.w, "%-14s %6s %11s %8s  %-44s %s\n", "phase", "fds", "goroutines", "rss_mb", "attack connections", "gateway dial")
}

func (t *table) row(phase string, s sample, conns, probe string) {
	fmt.Fprintf(t.w, "%-14s %6d %11d %8.1f  %-44s %s\n", phase, s.FDs, s.Goroutines, float64(s.RSSKiB)/1024, conns, probe)
}
