package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A run on connector processes (-connector): Instances real connector
// binaries serve one fleet on one Redis (store.backend redis), Clients
// gateway processes dial them from loopback source addresses of their own,
// so that no process holds more connections than the open-file limit
// allows. The run measures
//
//   - each connector process's memory per gateway: Go heap and stacks in
//     use (from its /metrics, after a garbage collection that ran once the
//     gateways were connected) and resident set, before and after;
//   - Redis's used_memory per gateway (INFO memory, before and after);
//   - the connect rate of all gateway processes dialing at once;
//   - the cores every process kept busy while the gateways were idle;
//   - one event to every tenant: a signed WhatsApp webhook per tenant,
//     round-robin over the connector processes, at -rate; latency from its
//     scheduled POST to the gateway's read;
//   - the same connections to as many bare echo server processes, measured
//     the same way (heap and stacks after a GC, resident set).

// procResult is what a run on connector processes measured.
type procResult struct {
	Opts                  options
	LoadBefore, LoadAfter string

	// Ready is how long the connector processes took to answer /readyz.
	Ready time.Duration

	Connected, ConnectFailed int
	ConnectTime              time.Duration
	Instances                []instanceResult
	// MaxClientFiles is the most files a gateway process had open.
	MaxClientFiles int
	// Broken is how many gateway connections ended before the events (a
	// connector closed them, or they failed).
	Broken int

	Redis redisResult
	// Idle is the CPU every process used while the gateways were idle,
	// Connecting while they connected, Events during the event per tenant.
	Idle, Connecting, Events cpuUse

	// Event is the one event to every tenant; nil when not reached.
	// Answered is how long its webhooks took to be answered 200.
	Event, Answered *stats

	// Echo are the echo server processes, in the same order.
	Echo []echoResult
}

// instanceResult is one connector process.
type instanceResult struct {
	Name          string
	Conns         int
	Before, After procMem
	Files         int // open files with the gateways connected
}

// echoResult is one echo server process.
type echoResult struct {
	Conns         int
	Before, After procMem
}

// redisResult is the Redis server's memory and keys before the gateways
// connected, once they were connected and idle, and after the events.
type redisResult struct {
	Before, Connected, AfterEvents redisSample
	// IdleCommands and IdlePublish are the commands, and the PUBLISH
	// commands among them, the server ran per second while the gateways
	// were idle (the instances' beats: leases, stored-ledger reads,
	// rosters and tallies between each instance and their tenant's driver).
	IdleCommands, IdlePublish float64
}

// redisSample is INFO memory's used_memory, the part of it that holds
// data (used_memory_dataset) and the part that buffers the clients'
// queries and answers (mem_clients_normal: the instances' connections),
// and DBSIZE.
type redisSample struct {
	UsedMemory, Dataset, Clients int64
	Keys                         int64
}

// runProcesses performs the run on connector processes o asks for. Every
// process it starts is stopped before it returns, also on failure.
func runProcesses(o *options) (res *procResult, err error) {
	res = &procResult{Opts: *o, LoadBefore: loadAverage()}
	ropt, err := redis.ParseURL(o.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis-url: %w", err)
	}
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	if res.Redis.Before, err = sampleRedis(rdb); err != nil {
		return nil, err
	}
	if res.Redis.Before.Keys != 0 {
		return nil, fmt.Errorf("the Redis database at -redis-url holds %d keys: the run needs an empty one (a fresh redis-server, or another db number)", res.Redis.Before.Keys)
	}
	redisPID := redisProcess(rdb)

	dir, err := os.MkdirTemp("", "relaybench-run-")
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "connector.yaml")
	defer func() { // after every process stopped
		if err == nil {
			_ = os.RemoveAll(dir)
			return
		}
		_ = os.Remove(config) // it holds the gateway secret
		err = fmt.Errorf("%w (the connector processes' logs are kept in %s)", err, dir)
	}()
	defer onSignal(func() { _ = os.RemoveAll(dir) })()
	wa := &whatsappDriver{}
	defer wa.close()
	waCfg := wa.setup(tenantIDs(o.Tenants))
	if err := writeInstanceConfig(config, o, waCfg); err != nil {
		return nil, err
	}
	env := []string{"WHATSAPP_APP_SECRET=" + waCfg.AppSecret, "WHATSAPP_ACCESS_TOKEN=" + waCfg.AccessToken,
		"WHATSAPP_VERIFY_TOKEN=" + waCfg.VerifyToken}

	var insts []*instance
	stopInstances := func() error {
		var errs []error
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, in := range insts {
			wg.Go(func() {
				if err := in.stop(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		insts = nil
		return errors.Join(errs...)
	}
	defer stopInstances()
	progress("starting %d connector processes with %d gateways and %d tenants in their config", o.Instances, o.Gateways, o.Tenants)
	started := time.Now()
	for i := range o.Instances {
		in, err := startInstance(o, dir, config, i, env)
		if err != nil {
			return res, err
		}
		insts = append(insts, in)
	}
	for _, in := range insts {
		if err := in.waitReady(); err != nil {
			return res, err
		}
	}
	res.Ready = time.Since(started)
	progress("ready in %s; waiting up to %s for each one's garbage collection", round(res.Ready), o.Settle)
	before, err := settle(insts, o.Settle)
	if err != nil {
		return res, err
	}
	if res.Redis.Before, err = sampleRedis(rdb); err != nil {
		return res, err
	}

	progress("connecting %d gateways from %d gateway processes", o.Gateways, o.Clients)
	clients, err := startClients(o, insts)
	defer func() {
		for _, c := range clients {
			_ = c.stop()
		}
	}()
	if err != nil {
		return res, err
	}
	cpuBefore := sampleProcesses(insts, redisPID, clients)
	if err := res.connect(clients, insts); err != nil {
		return res, err
	}
	res.Connecting = coresBetween(cpuBefore, sampleProcesses(insts, redisPID, clients))

	progress("%d connected in %s; waiting up to %s for each connector process's garbage collection", res.Connected, round(res.ConnectTime), o.Settle)
	after, err := settle(insts, o.Settle)
	if err != nil {
		return res, err
	}
	// The idle CPU, without scraping the processes' /metrics meanwhile.
	progress("measuring the idle CPU for %s", min(idleSpan, o.Settle))
	cpuBefore = sampleProcesses(insts, redisPID, clients)
	cmdsBefore, err := redisCommands(rdb)
	if err != nil {
		return res, err
	}
	time.Sleep(min(idleSpan, o.Settle))
	res.Idle = coresBetween(cpuBefore, sampleProcesses(insts, redisPID, clients))
	cmdsAfter, err := redisCommands(rdb)
	if err != nil {
		return res, err
	}
	res.Redis.IdleCommands, res.Redis.IdlePublish = cmdsAfter.rate(cmdsBefore)
	for _, c := range clients {
		_, broken, err := c.received()
		if err != nil {
			return res, err
		}
		res.Broken += broken
	}
	for i, in := range insts {
		res.Instances = append(res.Instances, instanceResult{Name: in.name, Conns: after[i].conns,
			Before: before[i].mem, After: after[i].mem, Files: after[i].fds})
	}
	for _, c := range clients {
		res.MaxClientFiles = max(res.MaxClientFiles, openFiles(c.pid()))
	}
	if res.Redis.Connected, err = sampleRedis(rdb); err != nil {
		return res, err
	}

	progress("one event to each of %d tenants", o.Tenants)
	cpuBefore = sampleProcesses(insts, redisPID, clients)
	if res.Event, err = eventPerTenant(o, wa, insts, clients); err != nil {
		return res, err
	}
	answered := wa.answered.take()
	res.Answered = &answered
	res.Events = coresBetween(cpuBefore, sampleProcesses(insts, redisPID, clients))
	if res.Redis.AfterEvents, err = sampleRedis(rdb); err != nil {
		return res, err
	}
	for _, c := range clients {
		if err := c.closeGateways(); err != nil {
			return res, err
		}
	}
	if err := stopInstances(); err != nil {
		return res, err
	}
	if o.Echo {
		progress("the echo baseline: %d echo server processes", o.Instances)
		if res.Echo, err = echoProcesses(o, clients); err != nil {
			return res, err
		}
	}
	res.LoadAfter = loadAverage()
	return res, nil
}

// onSignal makes SIGINT and SIGTERM run cleanup and exit 1, until stop is
// called. Every process of the run ends with this one: the connector
// processes by their parent-death signal, the gateway and echo server
// processes at the end of their input.
func onSignal(cleanup func()) (stop func()) {
	sigs := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			progress("%v: stopping", sig)
			cleanup()
			os.Exit(1)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// progress tells the operator, on stderr, what a run that takes minutes
// is doing.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "relaybench: %s %s\n", time.Now().Format(time.TimeOnly), fmt.Sprintf(format, args...))
}

// startClients starts the gateway processes: process c connects gateways
// [c*G/M, (c+1)*G/M) from loopback addresses of its own, 127.0.0.2 upwards,
// each gateway to the connector process o's layout gives it.
func startClients(o *options, insts []*instance) ([]*fleetProcess, error) {
	urls := make([]string, len(insts))
	for i, in := range insts {
		urls[i] = in.relayURL
	}
	per := o.Sources / o.Clients
	var clients []*fleetProcess
	for c := range o.Clients {
		first, end := c*o.Gateways/o.Clients, (c+1)*o.Gateways/o.Clients
		span := fleetSpan{first: first, count: end - first, sourceFirst: 2 + c*per, sources: per,
			layout: layout{tenants: o.Tenants, affinity: o.Affinity}}
		fl, err := startFleet(o, strings.Join(urls, ","), span)
		if err != nil {
			return clients, err
		}
		clients = append(clients, fl)
	}
	return clients, nil
}

// connect has every gateway process dial its gateways at once, and waits
// until the connector processes count them all.
func (res *procResult) connect(clients []*fleetProcess, insts []*instance) error {
	start := time.Now()
	errs := make([]error, len(clients))
	failed := make([]int, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() { failed[i], _, errs[i] = c.connect() })
	}
	wg.Wait()
	res.ConnectTime = time.Since(start)
	for _, n := range failed {
		res.ConnectFailed += n
	}
	res.Connected = res.Opts.Gateways - res.ConnectFailed
	if err := errors.Join(errs...); err != nil {
		return err
	}
	deadline := time.Now().Add(connectWait)
	for {
		n := 0
		for _, in := range insts {
			s, err := in.sample()
			if err != nil {
				return err
			}
			n += s.conns
		}
		if n == res.Connected {
			return nil
		}
		if time.Now().After(deadline) {
			broken := 0
			for _, c := range clients {
				_, b, _ := c.received()
				broken += b
			}
			return fmt.Errorf("the connector processes serve %d gateway connections after %v, want %d (the gateway processes saw %d connections end)",
				n, connectWait, res.Connected, broken)
		}
		time.Sleep(time.Second) // polling the processes' /metrics
	}
}

// settle waits, up to limit, until every connector process has run a
// garbage collection that ended after this call, and returns what their
// /metrics say a second after it (the cycle's sweep done); a process that
// ran none within limit has Collected false.
func settle(insts []*instance, limit time.Duration) ([]instanceSample, error) {
	first := make([]instanceSample, len(insts))
	for i, in := range insts {
		s, err := in.sample()
		if err != nil {
			return nil, err
		}
		first[i] = s
	}
	last := slices.Clone(first)
	seen := make([]bool, len(insts)) // the new cycle showed in last[i]
	done := make([]bool, len(insts))
	deadline := time.Now().Add(limit)
	for {
		pending := 0
		for i, in := range insts {
			if done[i] {
				continue
			}
			s, err := in.sample()
			if err != nil {
				return nil, err
			}
			s.mem.Collected = seen[i] || s.gcs > first[i].gcs
			done[i], seen[i], last[i] = seen[i], s.mem.Collected, s
			if !done[i] {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			return last, nil
		}
		time.Sleep(time.Second) // polling the processes' /metrics
	}
}

// idleSpan is how long the idle CPU is measured (unless -settle is
// shorter): several beats of the instances (a third of store.lease_ttl,
// 2 s by default) and registry polls (5 s).
const idleSpan = 15 * time.Second

// processTimes are the CPU ticks of the machine and of the run's
// processes at one moment.
type processTimes struct {
	at                                        time.Time
	machine, self, instances, redis, gateways uint64
	known, redisKnown                         bool
}

// sampleProcesses reads the CPU ticks of the machine, this process, the
// connector processes, the Redis server (pid 0: unknown) and the gateway
// processes.
func sampleProcesses(insts []*instance, redisPID int, clients []*fleetProcess) processTimes {
	t := processTimes{at: time.Now()}
	t.machine, t.known = machineTicks()
	self, ok := processTicks("self")
	t.self, t.known = self, t.known && ok
	for _, in := range insts {
		n, ok := processTicks(strconv.Itoa(in.cmd.Process.Pid))
		t.instances, t.known = t.instances+n, t.known && ok
	}
	for _, c := range clients {
		n, ok := processTicks(strconv.Itoa(c.pid()))
		t.gateways, t.known = t.gateways+n, t.known && ok
	}
	if redisPID > 0 {
		t.redis, t.redisKnown = processTicks(strconv.Itoa(redisPID))
	}
	return t
}

// cpuUse is the cores kept busy during a phase of the run: by the
// connector processes together, the Redis server, the gateway processes
// together, and every other process on the machine (this one included
// with the others only when the Redis server is not local). -1: unknown.
type cpuUse struct {
	Span                               time.Duration
	Instances, Redis, Gateways, Others float64
}

// coresBetween turns two samples into the cores kept busy between them.
func coresBetween(a, z processTimes) cpuUse {
	span := z.at.Sub(a.at)
	cores := func(x, y uint64) float64 { return float64(y-x) / clockTicks / span.Seconds() }
	c := cpuUse{Span: span, Instances: -1, Gateways: -1, Redis: -1, Others: -1}
	if span <= 0 || !a.known || !z.known {
		return c
	}
	c.Instances, c.Gateways = cores(a.instances, z.instances), cores(a.gateways, z.gateways)
	ours := (z.self - a.self) + (z.instances - a.instances) + (z.gateways - a.gateways)
	if a.redisKnown && z.redisKnown {
		c.Redis = cores(a.redis, z.redis)
		ours += z.redis - a.redis
	}
	if z.machine >= a.machine+ours {
		c.Others = float64(z.machine-a.machine-ours) / clockTicks / span.Seconds()
	} else {
		c.Others = 0
	}
	return c
}

// eventPerTenant posts one signed WhatsApp message to each tenant's
// business number, round-robin over the connector processes, at o.Rate
// (0: as fast as the webhook workers go), and waits until the gateways
// read them all or o.Drain passes after the last POST. Latency runs from
// each POST's scheduled time to the gateway's read.
func eventPerTenant(o *options, wa *whatsappDriver, insts []*instance, clients []*fleetProcess) (*stats, error) {
	for _, c := range clients { // start from nothing read
		if _, _, err := c.samples(); err != nil {
			return nil, err
		}
	}
	progress := make(chan struct{}, 1)
	urls := make([]string, len(insts))
	for i, in := range insts {
		urls[i] = in.baseURL
	}
	wa.start(progress, urls...)
	p := pacer{Rate: o.Rate, Count: o.Tenants, Window: o.Tenants + 1, InFlight: func() int64 { return 0 }, Progress: progress}
	start := time.Now()
	sent, failed, err := p.run(context.Background(), wa.fire)
	wa.stop() // every POST answered
	if err != nil {
		return nil, err
	}
	want := sent - failed - int(wa.failures())
	deadline := time.Now().Add(o.Drain)
	for {
		n := 0
		for _, c := range clients {
			got, _, err := c.received()
			if err != nil {
				return nil, err
			}
			n += got
		}
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the gateway processes
	}
	elapsed := time.Since(start)
	var all []time.Duration
	errs := 0
	for _, c := range clients {
		lat, e, err := c.samples()
		if err != nil {
			return nil, err
		}
		all = append(all, lat...)
		errs += e
	}
	st := summarize(all)
	st.Sent, st.Elapsed = sent, elapsed
	st.Errors = failed + int(wa.failures()) + errs
	return &st, nil
}

// echoProcesses measures the baseline: one echo server process per
// connector process, each holding the connections its connector process
// held (the gateway processes dial them with the same layout), memory
// before and after after a forced GC.
func echoProcesses(o *options, clients []*fleetProcess) ([]echoResult, error) {
	counts := make([]int, o.Instances)
	l := layout{tenants: o.Tenants, affinity: o.Affinity}
	for g := range o.Gateways {
		counts[l.connectorOf(g, o.Instances)]++
	}
	var servers []*echoServer
	defer func() {
		for _, s := range servers {
			_ = s.stop()
		}
	}()
	urls := make([]string, o.Instances)
	for i := range o.Instances {
		s, err := startEchoServerProcess(counts[i])
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
		urls[i] = s.url
	}
	res := make([]echoResult, len(servers))
	for i, s := range servers {
		m, err := s.mem()
		if err != nil {
			return nil, err
		}
		res[i] = echoResult{Conns: counts[i], Before: m}
	}
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		n := (i+1)*o.Gateways/o.Clients - i*o.Gateways/o.Clients
		wg.Go(func() { _, errs[i] = c.echoConnect(strings.Join(urls, ","), n) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	for i, s := range servers {
		m, err := s.mem()
		if err != nil {
			return res, err
		}
		res[i].After = m
	}
	return res, nil
}

// sampleRedis reads used_memory (INFO memory) and DBSIZE.
func sampleRedis(rdb *redis.Client) (redisSample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info := rdb.InfoMap(ctx, "memory")
	if err := info.Err(); err != nil {
		return redisSample{}, fmt.Errorf("redis INFO memory: %w", err)
	}
	r, err := parseRedisMemory(func(field string) string { return info.Item("Memory", field) })
	if err != nil {
		return redisSample{}, err
	}
	if r.Keys, err = rdb.DBSize(ctx).Result(); err != nil {
		return redisSample{}, fmt.Errorf("redis DBSIZE: %w", err)
	}
	return r, nil
}

// parseRedisMemory reads the memory fields of INFO memory through get.
func parseRedisMemory(get func(field string) string) (redisSample, error) {
	var r redisSample
	for field, dst := range map[string]*int64{"used_memory": &r.UsedMemory, "used_memory_dataset": &r.Dataset, "mem_clients_normal": &r.Clients} {
		v, err := strconv.ParseUint(get(field), 10, 64)
		if err != nil {
			return redisSample{}, fmt.Errorf("redis INFO memory: %s: %w", field, err)
		}
		*dst = int64(min(v, math.MaxInt64))
	}
	// Redis computes used_memory_dataset unsigned, as used_memory less an
	// overhead estimate: it wraps around when the estimate is the larger
	// (client buffers freed in between). That is no data.
	if r.Dataset > r.UsedMemory {
		r.Dataset = 0
	}
	return r, nil
}

// redisCounts are the server's command counters at one moment.
type redisCounts struct {
	at             time.Time
	total, publish int64
}

// redisCommands reads the commands the server has run (INFO stats) and
// the PUBLISH calls among them (INFO commandstats).
func redisCommands(rdb *redis.Client) (redisCounts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info := rdb.InfoMap(ctx, "stats", "commandstats")
	if err := info.Err(); err != nil {
		return redisCounts{}, fmt.Errorf("redis INFO stats: %w", err)
	}
	c := redisCounts{at: time.Now()}
	c.total, _ = strconv.ParseInt(info.Item("Stats", "total_commands_processed"), 10, 64)
	for f := range strings.SplitSeq(info.Item("Commandstats", "cmdstat_publish"), ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			c.publish, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return c, nil
}

// rate is the commands and PUBLISH commands per second from a to c.
func (c redisCounts) rate(a redisCounts) (commands, publish float64) {
	s := c.at.Sub(a.at).Seconds()
	if s <= 0 {
		return 0, 0
	}
	return float64(c.total-a.total) / s, float64(c.publish-a.publish) / s
}

// redisProcess is the Redis server's process id when it runs on this
// machine (INFO server's process_id, checked against /proc), else 0.
func redisProcess(rdb *redis.Client) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info := rdb.InfoMap(ctx, "server")
	if info.Err() != nil {
		return 0
	}
	pid, err := strconv.Atoi(info.Item("Server", "process_id"))
	if err != nil {
		return 0
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil || !strings.HasPrefix(string(comm), "redis-server") {
		return 0
	}
	return pid
}
