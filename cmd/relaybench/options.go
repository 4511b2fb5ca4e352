package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
	driverTelegram  = "telegram"
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
	// LeaseTTL is the connector processes' store.lease_ttl (driver idle
	// with -connector); zero keeps the connector's default.
	LeaseTTL time.Duration
	// Sources is how many loopback source addresses (127.0.0.1, .2, ...)
	// the gateways and echo clients dial from, round-robin: one address
	// to one listener runs out of ephemeral ports near 28,000 connections.
	// 0 picks one per 20,000 connections; a target other than loopback
	// (-url) dials from the system's choice. On connector processes
	// (-connector) every gateway process dials from addresses of its own,
	// 127.0.0.2 upwards.
	Sources int
	// Connector, when set, is the connector binary: the run starts
	// Instances of it (serve, store.backend redis on RedisURL) instead of
	// the in-process connector, and Clients gateway processes spread over
	// them (driver idle).
	Connector string
	// Clients is how many gateway processes share the gateways on
	// connector processes; 0 picks one per 16,000 gateways.
	Clients int
	// Affinity puts every gateway of a tenant on the same connector
	// process; otherwise a tenant's gateways are spread over all of them.
	Affinity bool
	// Settle bounds the wait for each connector process's next garbage
	// collection, before and after the gateways connect, so that the heap
	// it reports holds no garbage.
	Settle time.Duration
}

// connsPerClient is how many gateways -clients 0 gives one gateway
// process: below the 20,000 open-file limit with room to spare.
const connsPerClient = 16_000

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
	fs.StringVar(&o.Driver, "driver", driverSynthetic, "event source: synthetic, nexscope, discord, slack, whatsapp, telegram or idle")
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
	fs.DurationVar(&o.LeaseTTL, "lease-ttl", 0, "store.lease_ttl of the connector processes (driver idle with -connector); 0 keeps the connector's default")
	fs.IntVar(&o.Instances, "instances", 1, "relay instances sharing the redis store (-store redis, -driver synthetic); gateways and events are spread over them")
	fs.IntVar(&o.Sources, "sources", 0, "loopback source addresses 127.0.0.1..N the connections dial from (0: one per 20000 connections; in-process only)")
	fs.StringVar(&o.Connector, "connector", "", "the connector binary: run -instances processes of it on the redis at -redis-url, with the gateways in -clients processes (driver idle)")
	fs.IntVar(&o.Clients, "clients", 0, "gateway processes with -connector (0: one per 16000 gateways)")
	fs.BoolVar(&o.Affinity, "affinity", false, "with -connector: every gateway of a tenant on one connector process (default: spread over all)")
	fs.DurationVar(&o.Settle, "settle", 150*time.Second, "with -connector: longest wait for each connector process's next garbage collection before reading its heap (Go collects at least every 2 minutes)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.Tenants <= 0 {
		o.Tenants = o.Gateways
	}
	if o.Connector != "" {
		if o.Clients == 0 {
			o.Clients = ceilDiv(o.Gateways, connsPerClient)
		}
		if o.Store == store.BackendMemory {
			o.Store = store.BackendRedis
		}
		if o.Sources == 0 {
			o.Sources = max(1, o.Clients) * o.sourcesPerClient()
		}
	}
	if o.Sources == 0 && o.URL == "" {
		o.Sources = ceilDiv(o.Gateways, connsPerSource)
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
	case o.RedisMinReplicas < 0:
		return errors.New("-redis-min-replicas must not be negative")
	case o.Connector != "":
		return o.validateProcesses()
	case o.Instances > 1 && (o.Store != store.BackendRedis || o.Driver != driverSynthetic):
		return errors.New("-instances above 1 needs -store redis and -driver synthetic (or -connector)")
	case o.RedisMinReplicas > 0 && o.Store != store.BackendRedis:
		return errors.New("-redis-min-replicas needs -store redis")
	case o.Clients != 0 || o.Affinity:
		return errors.New("-clients and -affinity apply to -connector")
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
	case driverSynthetic, driverNexscope, driverDiscord, driverSlack, driverWhatsApp, driverTelegram, driverIdle:
		return nil
	}
	return fmt.Errorf("unknown -driver %q (synthetic, nexscope, discord, slack, whatsapp, telegram or idle)", o.Driver)
}

// validateProcesses checks a run on connector processes: every process
// (connector and gateway process alike) must hold its connections within
// the open-file limit, every gateway process needs source addresses of its
// own, and every tenant within the gateway ceiling of the config.
func (o *options) validateProcesses() error {
	limit := hardFileLimit()
	perInstance, perClient := ceilDiv(o.Gateways, o.Instances), ceilDiv(o.Gateways, max(1, o.Clients))
	perTenant := ceilDiv(o.Gateways, o.Tenants)
	switch {
	case o.Driver != driverIdle:
		return errors.New("-connector runs -driver idle (connections, then one event per tenant)")
	case o.URL != "":
		return errors.New("-connector and -url exclude each other")
	case o.RedisURL == "":
		return errors.New("-connector needs -redis-url: an empty Redis database the connector processes share")
	case o.Store != store.BackendRedis:
		return errors.New("-connector runs the connector processes on -store redis")
	case o.Clients < 1:
		return errors.New("-clients must be at least 1")
	case o.Producers > 1:
		return errors.New("-producers applies to -driver synthetic only")
	case o.RedisMinReplicas > 0:
		return errors.New("-redis-min-replicas applies to the in-process relay; the connector processes run on their config's defaults")
	case limit > 0 && uint64(perInstance)+fileMargin > limit:
		return fmt.Errorf("%d gateways over %d connector processes is %d connections each, above what the open-file limit %d allows: use at least %d -instances",
			o.Gateways, o.Instances, perInstance, limit, ceilDiv(o.Gateways, int(limit-fileMargin)))
	case limit > 0 && uint64(perClient)+fileMargin > limit:
		return fmt.Errorf("%d gateways over %d gateway processes is %d connections each, above what the open-file limit %d allows: use at least %d -clients",
			o.Gateways, o.Clients, perClient, limit, ceilDiv(o.Gateways, int(limit-fileMargin)))
	case o.Sources%o.Clients != 0 || 1+o.Sources > 254:
		return fmt.Errorf("-sources %d: want a multiple of -clients %d, at most 253 (127.0.0.2 upwards)", o.Sources, o.Clients)
	case perTenant > gatewayCeiling:
		return fmt.Errorf("%d gateways over %d tenants is %d per tenant, above the config's ceiling of %d: use more -tenants", o.Gateways, o.Tenants, perTenant, gatewayCeiling)
	case o.Settle < 0:
		return errors.New("-settle must not be negative")
	}
	if st, err := os.Stat(o.Connector); err != nil || st.IsDir() {
		return fmt.Errorf("-connector %s: not a file (build it: go build -o connector ./cmd/connector)", o.Connector)
	}
	return nil
}

// gatewayCeiling is the most gateways a tenant may have
// (registry.GatewayLimitCeiling).
const gatewayCeiling = 10_000

// sourcesPerClient is how many loopback source addresses each gateway
// process dials from on connector processes: one per 20,000 of its
// connections.
func (o *options) sourcesPerClient() int {
	return ceilDiv(ceilDiv(o.Gateways, max(1, o.Clients)), connsPerSource)
}

// ceilDiv is a/b rounded up.
func ceilDiv(a, b int) int { return (a + b - 1) / b }

// gatewayID is gateway i's id.
func (o *options) gatewayID(i int) string { return fmt.Sprintf("%s%d", o.GatewayPrefix, i) }

// helloPlatform is the platform the gateways hello.
func (o *options) helloPlatform() string {
	switch o.Driver {
	case driverNexscope, driverDiscord, driverSlack, driverTelegram:
		return o.Driver
	case driverWhatsApp:
		return "whatsapp_cloud"
	case driverSynthetic:
		return syntheticPlatformName
	}
	return "relay"
}
