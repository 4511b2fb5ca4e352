package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// Modes accepted by -mode.
const (
	modeBurst    = "burst"
	modeLogFlood = "logflood"
)

// Bounds on the flags: an attack mode stays a bounded experiment.
const (
	maxConns = 10_000
	maxHold  = 5 * time.Minute
	maxBytes = 64 << 20
)

// options are relayattack's flags; the attacker process gets the same ones
// plus -url.
type options struct {
	Mode string
	// URL is the relay's ws:// URL; set only for the attacker process.
	URL     string
	Conns   int
	Silent  float64
	Limit   int
	Hold    time.Duration
	Workers int
	Bytes   int
	// Frame is the kind of frame the log flood sends.
	Frame string
	// LogLevel is the level the relay logs at in the log flood.
	LogLevel string
}

// frameMix is -frame's value for every kind of invalid frame, round-robin.
const frameMix = "mix"

func parseOptions(name string, args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Mode, "mode", modeBurst, "attack: burst or logflood")
	fs.StringVar(&o.URL, "url", "", "relay URL (set by the parent for the attacker process)")
	fs.IntVar(&o.Conns, "conns", 300, "burst: connections of one gateway id")
	fs.Float64Var(&o.Silent, "silent", 0.5, "burst: share of the connections that never read (0 to 1)")
	fs.IntVar(&o.Limit, "limit", 16, "burst: the relay's max_conns_per_gateway")
	fs.DurationVar(&o.Hold, "hold", 10*time.Second, "burst: how long the attacker holds its connections after dialing")
	fs.IntVar(&o.Workers, "workers", 64, "burst: connections dialing at once")
	fs.IntVar(&o.Bytes, "bytes", 5<<20, "logflood: bytes of invalid frames to send")
	fs.StringVar(&o.LogLevel, "log-level", "info", "the relay's log level (debug, info, warn); its log is counted, not kept")
	fs.StringVar(&o.Frame, "frame", frameMix, "logflood: frames to send: malformed, unknown, outbound, interrupt, ack, hello, idle or mix (the invalid ones)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return o, o.validate()
}

func (o *options) validate() error {
	switch {
	case o.Mode != modeBurst && o.Mode != modeLogFlood:
		return fmt.Errorf("unknown -mode %q (burst or logflood)", o.Mode)
	case o.Conns < 1 || o.Conns > maxConns:
		return fmt.Errorf("-conns must be 1 to %d", maxConns)
	case o.Silent < 0 || o.Silent > 1:
		return errors.New("-silent must be 0 to 1")
	case o.Limit < 1:
		return errors.New("-limit must be at least 1")
	case o.Hold < 0 || o.Hold > maxHold:
		return fmt.Errorf("-hold must be 0 to %v", maxHold)
	case o.Workers < 1:
		return errors.New("-workers must be at least 1")
	case o.Bytes < 1 || o.Bytes > maxBytes:
		return fmt.Errorf("-bytes must be 1 to %d", maxBytes)
	case o.Frame != frameMix && floodKinds[o.Frame] == nil:
		return fmt.Errorf("unknown -frame %q (malformed, unknown, outbound, interrupt, ack, hello, idle or mix)", o.Frame)
	}
	return nil
}

// args renders o as the attacker process's flags.
func (o *options) args(url string) []string {
	return []string{"-mode", o.Mode, "-url", url,
		"-conns", fmt.Sprint(o.Conns), "-silent", fmt.Sprint(o.Silent), "-limit", fmt.Sprint(o.Limit),
		"-hold", o.Hold.String(), "-workers", fmt.Sprint(o.Workers), "-bytes", fmt.Sprint(o.Bytes), "-frame", o.Frame}
}
