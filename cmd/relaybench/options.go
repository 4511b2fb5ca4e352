package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"connector/store"
)

// Driver names accepted by -driver.
const (
	driverSynthetic = "synthetic"
	driverNexscope  = "nexscope"
	driverDiscord   = "discord"
	driverSlack     = "slack"
	driverWhatsApp  = "whatsapp"
	driverIdle      = "idle"
)

// options are relaybench's flags.
type options struct {
	// URL targets a running connector's /relay (ws:// or wss://); empty runs
	// the connector in-process.
	URL string
	// GatewayPrefix names gateway i "<prefix><i>"; with -url the connector
	// must know these ids with Secret.
	GatewayPrefix string
	Secret        string
	Gateways      int
	Tenants       int
	Driver        string
	// Rate is events per second; 0 sends as fast as Window allows.
	Rate     float64
	Duration time.Duration
	// Window bounds events sent and not yet acknowledged by a gateway.
	Window int
	// Echo runs the bare-transport baseline after the connector run.
	Echo bool
	// ConnectWorkers is how many gateways dial at once.
	ConnectWorkers int
	// Drain bounds the wait for the last events after the driver stopped.
	Drain time.Duration
	// CPUProfile, when set, receives a CPU profile of the connector's
	// process during the event run.
	CPUProfile string
	// Store is the in-process relay's store backend: memory, embedded or
	// redis. A run on embedded or redis also measures memory first, as the
	// baseline its figures are divided by.
	Store string
	// StoreDir is where the embedded backend's data directory is created
	// (a fresh one per run, removed afterwards); empty: the system's
	// temporary directory.
	StoreDir string
	// RedisURL addresses the redis backend's server.
	RedisURL string
	// RedisMinReplicas is the store's RedisMinReplicas: appends wait for
	// that many of the server's replicas (WAIT).
	RedisMinReplicas int
	// Producers is how many goroutines the synthetic driver publishes from
	// at once, as concurrent webhooks would; 1 publishes one event at a
	// time.
	Producers int
	// Instances is how many relay instances share the redis store, each
	// with its own store client and listener; the gateways are spread
	// over them and every instance ingests events.
	Instances int
	// Sources is how many loopback source addresses (127.0.0.1, .2, ...)
	// the gateways and echo clients dial from, round-robin: one address
	// to one listener runs out of ephemeral ports near 28,000 connections.
	// 0 picks one per 20,000 connections; a target other than loopback
	// (-url) dials from the system's choice.
	Sources int
}

// connsPerSource is how many connections -sources 0 puts on one loopback
// source address, well within the default ephemeral port range.
const connsPerSource = 20_000

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("relaybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.URL, "url", "", "target a running connector's /relay URL instead of an in-process one (driver idle only)")
	fs.StringVar(&o.GatewayPrefix, "gateway-prefix", "bench-gw-", "gateway i is named <prefix><i>")
	fs.StringVar(&o.Secret, "secret", "", "gateway HMAC secret (required with -url; random in-process)")
	fs.IntVar(&o.Gateways, "gateways", 10, "gateways to connect")
	fs.IntVar(&o.Tenants, "tenants", 0, "tenants the gateways are spread over, round-robin (default: one per gateway)")
	fs.StringVar(&o.Driver, "driver", driverSynthetic, "event source: synthetic, nexscope, discord, slack, whatsapp or idle")
	fs.Float64Var(&o.Rate, "rate", 1000, "events per second (0: as fast as -window allows)")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "how long to drive events")
	fs.IntVar(&o.Window, "window", 1024, "most events sent and not yet acknowledged by a gateway")
	fs.BoolVar(&o.Echo, "echo", true, "also measure a bare coder/websocket echo server with the same load")
	fs.IntVar(&o.ConnectWorkers, "connect-workers", 8, "gateways dialing at once")
	fs.DurationVar(&o.Drain, "drain", 10*time.Second, "longest wait for events still in flight after the driver stopped")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the connector process during the event run to this file")
	fs.StringVar(&o.Store, "store", store.BackendMemory, "store backend of the in-process relay: memory, embedded or redis (embedded and redis are also compared with memory in the same run)")
	fs.StringVar(&o.StoreDir, "store-dir", "", "where the embedded store's data directory is made (default: the system's temporary directory; put it on the disk you mean to measure)")
	fs.StringVar(&o.RedisURL, "redis-url", "", "redis:// URL of the server for -store redis (keys under a fresh prefix per run)")
	fs.IntVar(&o.RedisMinReplicas, "redis-min-replicas", 0, "with -store redis, each append waits until this many replicas of the server have it (store.redis_min_replicas)")
	fs.IntVar(&o.Producers, "producers", 1, "goroutines the synthetic driver publishes from at once (all instances together)")
	fs.IntVar(&o.Instances, "instances", 1, "relay instances sharing the redis store (-store redis, -driver synthetic); gateways and events are spread over them")
	fs.IntVar(&o.Sources, "sources", 0, "loopback source addresses 127.0.0.1..N the connections dial from (0: one per 20000 connections; in-process only)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.Tenants <= 0 {
		o.Tenants = o.Gateways
	}
	if o.Sources == 0 && o.URL == "" {
		o.Sources = (o.Gateways + connsPerSource - 1) / connsPerSource
	}
	if o.Secret == "" && o.URL == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		o.Secret = hex.EncodeToString(b[:])
	}
	return o, o.validate()
}

func (o *options) validate() error {
	switch {
	case o.Gateways < 1:
		return errors.New("-gateways must be at least 1")
	case o.Tenants > o.Gateways:
		return errors.New("-tenants must not exceed -gateways")
	case o.Rate < 0:
		return errors.New("-rate must not be negative")
	case o.Duration <= 0 && o.Driver != driverIdle:
		return errors.New("-duration must be positive")
	case o.Window < 1:
		return errors.New("-window must be at least 1")
	case o.ConnectWorkers < 1:
		return errors.New("-connect-workers must be at least 1")
	case o.URL != "" && o.Secret == "":
		return errors.New("-url needs -secret")
	case o.URL != "" && o.Driver != driverIdle:
		return fmt.Errorf("-driver %s needs the in-process connector; with -url use -driver idle", o.Driver)
	case o.Producers < 1:
		return errors.New("-producers must be at least 1")
	case o.Producers > 1 && o.Driver != driverSynthetic:
		return errors.New("-producers applies to -driver synthetic only")
	case o.Sources < 0 || o.Sources > 254:
		return errors.New("-sources must be between 0 and 254")
	case o.Sources > 1 && o.URL != "":
		return errors.New("-sources applies to the in-process connector (loopback)")
	case o.Instances < 1:
		return errors.New("-instances must be at least 1")
	case o.Instances > 1 && (o.Store != store.BackendRedis || o.Driver != driverSynthetic):
		return errors.New("-instances above 1 needs -store redis and -driver synthetic")
	case o.RedisMinReplicas < 0:
		return errors.New("-redis-min-replicas must not be negative")
	case o.RedisMinReplicas > 0 && o.Store != store.BackendRedis:
		return errors.New("-redis-min-replicas needs -store redis")
	}
	switch o.Store {
	case store.BackendMemory, store.BackendEmbedded:
	case store.BackendRedis:
		if o.RedisURL == "" {
			return errors.New("-store redis needs -redis-url (e.g. redis://127.0.0.1:6379/0)")
		}
	default:
		return fmt.Errorf("unknown -store %q (memory, embedded or redis)", o.Store)
	}
	if o.Store != store.BackendMemory && o.URL != "" {
		return errors.New("-store applies to the in-process connector; a connector at -url uses its own")
	}
	switch o.Driver {
	case driverSynthetic, driverNexscope, driverDiscord, driverSlack, driverWhatsApp, driverIdle:
		return nil
	}
	return fmt.Errorf("unknown -driver %q (synthetic, nexscope, discord, slack, whatsapp or idle)", o.Driver)
}

// gatewayID is gateway i's id.
func (o *options) gatewayID(i int) string { return fmt.Sprintf("%s%d", o.GatewayPrefix, i) }

// helloPlatform is the platform the gateways hello.
func (o *options) helloPlatform() string {
	switch o.Driver {
	case driverNexscope, driverDiscord, driverSlack:
		return o.Driver
	case driverWhatsApp:
		return "whatsapp_cloud"
	case driverSynthetic:
		return syntheticPlatformName
	}
	return "relay"
}
