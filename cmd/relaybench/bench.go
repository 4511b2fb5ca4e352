package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"connector/platform"
	"connector/relay"
	"connector/store"
)

// connectWait bounds the wait for the relay to count every connection.
const connectWait = 60 * time.Second

func benchMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "relaybench: %v\n", err)
		}
		return 2
	}
	var res interface{ print(io.Writer) }
	if o.Connector != "" {
		res, err = runProcesses(&o)
	} else if err = raiseFileLimit(o.Gateways); err == nil {
		res, err = run(&o)
	}
	if res != nil { // a nil *result or *procResult prints nothing
		res.print(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "relaybench: %v\n", err)
		return 1
	}
	return 0
}

// result is everything one run measured.
type result struct {
	Opts          options
	Connected     int
	ConnectFailed int
	ConnectTime   time.Duration
	// Memory is the connector's cost per idle gateway connection; nil when
	// the connector is not in this process (-url).
	Memory *connMemory
	// EchoMemory is the echo server's cost per idle connection.
	EchoMemory  *connMemory
	EchoConnect time.Duration
	// Connector is the event run through the connector; nil for -driver idle.
	Connector *stats
	// Echo is the same load against the bare echo server.
	Echo *stats
	// ConnectorNoise and EchoNoise are the cores other processes kept busy
	// during each run (-1 unknown).
	ConnectorNoise, EchoNoise float64
	// ConnectorCPU and EchoCPU are the CPU time this process and the
	// gateway process used during each run (-1 unknown): on a machine
	// other work shares, CPU per event compares the two runs where their
	// throughput depends on what else ran.
	ConnectorCPU, EchoCPU time.Duration
	// ConnectorSelfCPU and EchoSelfCPU are the parts of ConnectorCPU and
	// EchoCPU this process used (-1 unknown); the rest is the gateways'.
	ConnectorSelfCPU, EchoSelfCPU time.Duration
	// MemoryStore is the same event run on the memory store, measured just
	// before, when Opts.Store is another backend; MemoryStoreNoise is its
	// ConnectorNoise.
	MemoryStore      *stats
	MemoryStoreNoise float64
}

// eventDriver produces the events of a run.
type eventDriver interface {
	// fire produces event seq, stamped with its scheduled time at.
	fire(seq int, at time.Time) error
	// failures counts events fired that will never reach the relay.
	failures() int64
}

// run performs the measurement o asks for. On a store other than memory it
// first runs the same load on the memory store (without echo), the
// baseline the store's figures are compared with.
func run(o *options) (*result, error) {
	if o.Store == store.BackendMemory || o.Driver == driverIdle {
		return runOnce(o)
	}
	base := *o
	base.Store, base.Echo, base.CPUProfile, base.Instances = store.BackendMemory, false, "", 1
	baseRes, err := runOnce(&base)
	if err != nil {
		return baseRes, fmt.Errorf("memory store baseline: %w", err)
	}
	res, err := runOnce(o)
	if res != nil {
		res.MemoryStore, res.MemoryStoreNoise = baseRes.Connector, baseRes.ConnectorNoise
	}
	return res, err
}

// runOnce performs one measurement: connect, measure idle memory, drive
// events, then the echo baseline.
func runOnce(o *options) (*result, error) {
	res := &result{Opts: *o}
	var (
		c        *connector
		drv      eventDriver
		nexDrv   *nexscopeDriver
		discDrv  *discordDriver
		slackDrv *slackDriver
		platf    platform.Platform
		waDrv    *whatsappDriver
		tgDrv    *telegramDriver
		relayURL = o.URL
		echoURL  string
		err      error
	)
	if o.URL == "" {
		var newPlatform func([]relay.Tenant) (platform.Platform, error)
		switch o.Driver {
		case driverSynthetic:
			newPlatform = func(ts []relay.Tenant) (platform.Platform, error) {
				p := newSyntheticPlatform(ts, o.Producers, o.Instances)
				drv = p
				return p, nil
			}
			defer func() {
				if p, ok := drv.(*syntheticPlatform); ok {
					p.stop()
				}
			}()
		case driverNexscope:
			nexDrv = &nexscopeDriver{token: randomToken()}
			drv = nexDrv
			newPlatform = nexDrv.newPlatform
		case driverDiscord:
			discDrv = &discordDriver{}
			drv = discDrv
			newPlatform = discDrv.newPlatform
			defer discDrv.close()
		case driverSlack:
			slackDrv = &slackDriver{}
			drv = slackDrv
			newPlatform = func(ts []relay.Tenant) (platform.Platform, error) {
				p, err := slackDrv.newPlatform(ts)
				platf = p
				return p, err
			}
			defer slackDrv.close()
		case driverWhatsApp:
			waDrv = &whatsappDriver{}
			drv = waDrv
			newPlatform = waDrv.newPlatform
			defer waDrv.close()
		case driverTelegram:
			tgDrv = &telegramDriver{}
			drv = tgDrv
			newPlatform = tgDrv.newPlatform
			defer tgDrv.close()
		}
		if c, err = startConnector(o, newPlatform); err != nil {
			return nil, err
		}
		defer c.close()
		relayURL, echoURL = strings.Join(c.RelayURLs, ","), c.EchoURL
	} else {
		stopEcho, url, err := startEchoServer()
		if err != nil {
			return nil, err
		}
		defer stopEcho()
		echoURL = url
	}

	fl, err := startFleet(o, relayURL, wholeFleet(o))
	if err != nil {
		return nil, err
	}
	defer fl.stop()

	base := snapshot()
	if res.ConnectFailed, res.ConnectTime, err = fl.connect(); err != nil {
		return res, err
	}
	res.Connected = o.Gateways - res.ConnectFailed
	if c != nil {
		if err := c.waitConns(res.Connected, connectWait); err != nil {
			return res, err
		}
		res.Memory = perConn(base, snapshot(), res.Connected)
	}

	if drv != nil {
		if nexDrv != nil {
			if err := nexDrv.connect(c.BaseURL, len(c.Tenants)); err != nil {
				return res, err
			}
			defer nexDrv.close()
		}
		if discDrv != nil {
			if err := discDrv.start(c.BaseURL, c.Metrics.progress); err != nil {
				return res, err
			}
		}
		if slackDrv != nil {
			if err := slackDrv.start(c.BaseURL, platf, c.Metrics.progress); err != nil {
				return res, err
			}
		}
		if waDrv != nil {
			waDrv.start(c.Metrics.progress, c.BaseURL)
		}
		if tgDrv != nil {
			if err := tgDrv.start(c.Metrics.progress); err != nil {
				return res, err
			}
		}
		before := sampleCPU(fl.pid())
		st, err := driveConnector(o, c, drv, fl)
		after := sampleCPU(fl.pid())
		res.ConnectorNoise, res.ConnectorCPU, res.ConnectorSelfCPU = othersCores(before, after), ownCPU(before, after), selfCPU(before, after)
		res.Connector = &st
		if err != nil {
			return res, err
		}
	}
	if err := fl.closeGateways(); err != nil {
		return res, err
	}
	if c != nil {
		if err := c.waitConns(0, connectWait); err != nil {
			return res, err
		}
	}

	if o.Echo {
		base := snapshot()
		if res.EchoConnect, err = fl.echoConnect(echoURL, res.Connected); err != nil {
			return res, err
		}
		res.EchoMemory = perConn(base, snapshot(), res.Connected)
		if res.Connector != nil {
			size := max(res.Connector.AvgBytes(), 64)
			before := sampleCPU(fl.pid())
			st, err := fl.echoRun(size, pacer{Rate: o.Rate, Duration: o.Duration, Window: o.Window})
			after := sampleCPU(fl.pid())
			res.EchoNoise, res.EchoCPU, res.EchoSelfCPU = othersCores(before, after), ownCPU(before, after), selfCPU(before, after)
			if err != nil {
				return res, err
			}
			res.Echo = &st
		}
	}
	return res, nil
}

// driveConnector runs the pacer over drv and collects the gateways' stats.
// In flight are events fired and neither acknowledged by a gateway, nor
// dropped by the relay, nor failed before reaching it.
func driveConnector(o *options, c *connector, drv eventDriver, fl *fleetProcess) (stats, error) {
	m := c.Metrics
	ackedBefore, droppedBefore, failedBefore := m.acked.Load(), m.dropped.Load(), drv.failures()
	var fired atomic.Int64
	done := func() int64 {
		return m.acked.Load() - ackedBefore + m.dropped.Load() - droppedBefore + drv.failures() - failedBefore
	}
	p := pacer{Rate: o.Rate, Duration: o.Duration, Window: o.Window,
		InFlight: func() int64 { return fired.Load() - done() }, Progress: m.progress}
	if o.CPUProfile != "" {
		stop, err := startCPUProfile(o.CPUProfile)
		if err != nil {
			return stats{}, err
		}
		defer stop()
	}
	start := time.Now()
	sent, failed, runErr := p.run(context.Background(), func(seq int, at time.Time) error {
		err := drv.fire(seq, at)
		if err == nil {
			fired.Add(1)
		}
		return err
	})
	drain(func() bool { return done() >= fired.Load() }, m.progress, o.Drain)
	elapsed := time.Since(start)
	st, err := fl.report()
	if err != nil {
		return st, err
	}
	st.Sent, st.Elapsed = sent, elapsed
	st.Errors += failed + int(m.dropped.Load()-droppedBefore) + int(drv.failures()-failedBefore)
	return st, runErr
}

// startCPUProfile profiles this process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// startEchoServer serves the echo baseline on its own loopback port, for
// runs against a remote connector.
func startEchoServer() (stop func(), url string, err error) {
	c := &connector{}
	mux := http.NewServeMux()
	mux.Handle("/echo", echoHandler())
	addr, err := c.listen(mux)
	if err != nil {
		return nil, "", err
	}
	return c.close, "ws://" + addr + "/echo", nil
}

// connMemory is a server's cost per connection.
type connMemory struct {
	HeapBytes  float64
	StackBytes float64
	Goroutines float64
}

// memSnapshot is this process after a forced GC.
type memSnapshot struct {
	heap, stack uint64
	goroutines  int
}

func snapshot() memSnapshot {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	// Further cycles free what finalizers released, and halve idle
	// goroutines' oversized stacks one step per cycle: repeat until the
	// stacks stop shrinking, so that a shrink does not pass for a saving.
	for range 8 {
		stack := m.StackInuse
		runtime.GC()
		runtime.ReadMemStats(&m)
		if m.StackInuse >= stack {
			break
		}
	}
	return memSnapshot{heap: m.HeapInuse, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// perConn is the growth from a to z spread over n connections.
func perConn(a, z memSnapshot, n int) *connMemory {
	if n == 0 {
		return nil
	}
	d := func(x, y uint64) float64 { return (float64(y) - float64(x)) / float64(n) }
	return &connMemory{
		HeapBytes: d(a.heap, z.heap), StackBytes: d(a.stack, z.stack),
		Goroutines: float64(z.goroutines-a.goroutines) / float64(n),
	}
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
