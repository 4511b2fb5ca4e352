package relay_test

// Benchmarks of the relay's inbound path and of an idle gateway connection.
//
// The gateways run in a child process: this test binary re-executed with
// benchChildEnv set, which makes TestBenchGatewayProcess serve a small
// command protocol on stdin/stdout (connect, report, close). The parent
// process then holds only the relay, its httptest listener and the test
// platform, so its runtime.MemStats (allocations per event, heap and stacks
// per connection) are the server side alone. Both processes share the
// machine's cores, as gateways on the same host would.
//
//	go test -run='^$' -bench=. -benchtime=2s ./relay
//	go test -run='^$' -bench='IdleGateways/conns=10000' -benchtime=1x ./relay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/session"
)

// benchChildEnv carries the relay's ws:// URL to the gateway child process.
const benchChildEnv = "RELAY_BENCH_CHILD_URL"

// benchSecret signs every benchmark gateway's upgrade token.
const benchSecret = "bench-secret"

// benchPlatformName is the test platform's wire name.
const benchPlatformName = "bench"

// benchWait bounds every wait of the benchmarks; hitting it fails the run.
const benchWait = 60 * time.Second

// benchBody pads each event's text to a typical chat message length.
const benchBody = " hey @bot can you summarize the thread above and list the open questions? thanks!"

func BenchmarkInbound(b *testing.B) {
	for _, topo := range []struct{ gateways, tenants int }{
		{1, 1},
		{100, 100},
		{1000, 1000},
		{1000, 1},
	} {
		for _, window := range []int{1, 256} {
			name := fmt.Sprintf("gateways=%d,tenants=%d/inflight=%d", topo.gateways, topo.tenants, window)
			b.Run(name, func(b *testing.B) { benchInbound(b, topo.gateways, topo.tenants, window) })
		}
	}
}

// benchInbound publishes events round-robin over the tenants (and over
// 4 sessions per gateway within a tenant), never more than window
// unacknowledged at once, and reports latency from publish to the gateway
// reading the frame, throughput until every event is acknowledged, and the
// bytes the relay allocated per event.
func benchInbound(b *testing.B, gateways, tenants, window int) {
	rig := startBenchRig(b, gateways, tenants)
	rig.child.connect(b, 0, gateways)
	rig.waitConns(b, gateways)

	pub := newBenchPublisher(rig.tenantIDs, 4*max(1, gateways/tenants))
	perEventOverhead := pub.allocBytesPerEvent(10_000)

	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goBefore := goroutinesCreated()
	start := time.Now()
	n := 0
	for b.Loop() {
		rig.metrics.waitInFlightBelow(b, window)
		rig.platform.publish(pub.next(n))
		n++
	}
	rig.metrics.waitInFlightBelow(b, 1)
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	goStarted := goroutinesCreated() - goBefore

	st := rig.child.report(b)
	if st.count != n {
		b.Fatalf("gateways read %d inbound frames, published %d", st.count, n)
	}
	relayBytes := float64(after.TotalAlloc-before.TotalAlloc)/float64(n) - perEventOverhead
	b.ReportMetric(float64(st.p50), "p50-ns")
	b.ReportMetric(float64(st.p99), "p99-ns")
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	b.ReportMetric(max(relayBytes, 0), "relay-B/event")
	b.ReportMetric(float64(goStarted)/float64(n), "goroutines/event")
}

// goroutinesCreated is how many goroutines this process has started so far.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestIdleGatewayStack: a connection's reader goes on on a fresh goroutine
// once a message with a hello is handled (conn.read), so an idle gateway's
// reader keeps a small stack: 3.2 to 4.2 KiB per connection, against 7.6 to
// 8 KiB when the reader that handled the hello blocks on the next read
// (under the race detector 4.3 to 8.5 KiB, against 12.6 to 16.4 KiB).
func TestIdleGatewayStack(t *testing.T) {
	const n = 300
	limit := int64(6 << 10)
	if relay.RaceDetector {
		limit = 11 << 10
	}
	rig := startBenchRig(t, n, 1+n/10)
	rig.waitConns(t, 0)
	base := measureMemory()
	rig.child.connect(t, 0, n)
	rig.waitConns(t, n)
	loaded := measureMemory()
	if per := (int64(loaded.stackInuse) - int64(base.stackInuse)) / n; per > limit {
		t.Fatalf("%d B of goroutine stack per idle gateway, want at most %d", per, limit)
	}
}

func BenchmarkIdleGateways(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10_000} {
		b.Run("conns="+strconv.Itoa(n), func(b *testing.B) { benchIdle(b, n) })
	}
}

// benchIdle connects n authenticated, hello'd gateways per iteration (the
// timed part) and reports the relay process's heap in use, goroutine stacks
// and goroutines per connection, measured after a forced GC against the
// same process before the gateways connected.
func benchIdle(b *testing.B, n int) {
	if n > 1000 && testing.Short() {
		b.Skip("more than 1,000 connections in -short mode")
	}
	rig := startBenchRig(b, n, 1+n/10)
	var base, loaded benchMemory
	var connect time.Duration
	for b.Loop() {
		b.StopTimer()
		rig.waitConns(b, 0)
		base = measureMemory()
		b.StartTimer()

		connect = rig.child.connect(b, 0, n)

		b.StopTimer()
		rig.waitConns(b, n)
		loaded = measureMemory()
		rig.child.closeAll(b)
		b.StartTimer()
	}
	per := func(a, z uint64) float64 { return (float64(z) - float64(a)) / float64(n) }
	b.ReportMetric(per(base.heapInuse, loaded.heapInuse), "heap-B/conn")
	b.ReportMetric(per(base.stackInuse, loaded.stackInuse), "stack-B/conn")
	b.ReportMetric(per(uint64(base.goroutines), uint64(loaded.goroutines)), "goroutines/conn")
	b.ReportMetric(float64(connect.Nanoseconds())/float64(n), "connect-ns/conn")
}

// benchMemory is a snapshot of this process after a forced GC.
type benchMemory struct {
	heapInuse, stackInuse uint64
	goroutines            int
}

func measureMemory() benchMemory {
	runtime.GC()
	runtime.GC() // a second cycle frees what the first one's finalizers released
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return benchMemory{heapInuse: m.HeapInuse, stackInuse: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// benchRig is a relay with one test platform on loopback and a gateway child
// process pointed at it. Gateway i is "gw<i>" in tenant "t<i mod tenants>".
type benchRig struct {
	platform  *benchPlatform
	metrics   *benchMetrics
	child     *benchChild
	tenantIDs []string
}

func startBenchRig(b testing.TB, gateways, tenants int) *benchRig {
	b.Helper()
	raiseFileLimit(b)
	ids := make([]string, tenants)
	relayTenants := make([]relay.Tenant, tenants)
	for i := range tenants {
		ids[i] = "t" + strconv.Itoa(i)
		relayTenants[i].ID = ids[i]
	}
	for i := range gateways {
		t := &relayTenants[i%tenants]
		t.Gateways = append(t.Gateways, relay.Gateway{ID: "gw" + strconv.Itoa(i), Secrets: []string{benchSecret}})
	}
	p := newBenchPlatform()
	m := newBenchMetrics(ids)
	h := relaytest.StartConfig(b, relay.Config{
		Tenants: relayTenants, Platforms: []platform.Platform{p},
		Log: slog.New(slog.DiscardHandler), Metrics: m,
	})
	p.waitRunning(b)
	return &benchRig{platform: p, metrics: m, child: startBenchChild(b, h.RelayURL()), tenantIDs: ids}
}

// waitConns waits until the relay serves exactly n gateway connections.
func (r *benchRig) waitConns(b testing.TB, n int) {
	b.Helper()
	deadline := time.Now().Add(benchWait)
	for r.metrics.conns.Load() != int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("relay serves %d connections, want %d", r.metrics.conns.Load(), n)
		}
		select {
		case <-r.metrics.connsChanged:
		case <-time.After(time.Until(deadline)):
		}
	}
}

// raiseFileLimit lifts the soft open-file limit to the hard one, for the
// thousands of sockets the benchmarks open.
func raiseFileLimit(tb testing.TB) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Logf("getrlimit: %v", err)
		return
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			tb.Logf("setrlimit: %v", err)
		}
	}
}

// benchPlatform is a platform with no chats of its own: it only publishes
// the deliveries the benchmark gives it on the sink the relay ran it with.
type benchPlatform struct {
	running chan struct{}
	sink    platform.Sink // set before running is closed
}

func newBenchPlatform() *benchPlatform { return &benchPlatform{running: make(chan struct{})} }

func (p *benchPlatform) Name() string { return benchPlatformName }

func (p *benchPlatform) Descriptor() descriptor.Descriptor {
	return descriptor.Nexscope([]string{contract.OpSend}, 4000)
}

func (p *benchPlatform) Run(ctx context.Context, sink platform.Sink) error {
	p.sink = sink
	close(p.running)
	<-ctx.Done()
	return nil
}

func (p *benchPlatform) ChatTenant(context.Context, string) (string, error) {
	return "", platform.ErrUnknownChat
}

func (p *benchPlatform) Execute(context.Context, string, *contract.Action) contract.Result {
	return contract.Failed(contract.CodeUnsupportedOp, "the bench platform sends nothing")
}

func (p *benchPlatform) Status() platform.Status { return platform.Status{Ready: true} }

func (p *benchPlatform) waitRunning(b testing.TB) {
	b.Helper()
	select {
	case <-p.running:
	case <-time.After(benchWait):
		b.Fatal("bench platform never started")
	}
}

func (p *benchPlatform) publish(d platform.Delivery) {
	_ = p.sink.Deliver(context.Background(), d)
}

// benchPublisher builds the benchmark's deliveries: realistic group-chat
// events whose text starts with the publish time ("t=<unix ns> …"), which
// the gateway child turns into a latency.
type benchPublisher struct {
	sessions [][]benchSession // per tenant
	tenants  []string
	buf      []byte
}

type benchSession struct {
	key    string
	source session.Source
}

func newBenchPublisher(tenants []string, sessionsPerTenant int) *benchPublisher {
	p := &benchPublisher{tenants: tenants, sessions: make([][]benchSession, len(tenants))}
	for ti, t := range tenants {
		for s := range sessionsPerTenant {
			chat := "chat-" + t + "-" + strconv.Itoa(s)
			user := "1000" + strconv.Itoa(s)
			src := session.Source{
				Platform: benchPlatformName, ChatID: chat, ChatName: session.Str("general"),
				ChatType: session.ChatTypeGroup, UserID: session.Str(user), UserName: session.Str("alice"),
			}
			key := session.Key(&src, session.DefaultOptions)
			p.sessions[ti] = append(p.sessions[ti], benchSession{key: key, source: src})
		}
	}
	return p
}

// next returns delivery i: tenant i mod T, then the tenant's sessions in turn.
func (p *benchPublisher) next(i int) platform.Delivery {
	ti := i % len(p.tenants)
	ss := p.sessions[ti]
	s := &ss[(i/len(p.tenants))%len(ss)]
	now := time.Now()
	p.buf = strconv.AppendInt(append(p.buf[:0], "t="...), now.UnixNano(), 10)
	p.buf = append(p.buf, benchBody...)
	ev := &contract.Event{Text: string(p.buf), MessageType: contract.MessageText, MessageID: "m1", Source: s.source}
	return platform.Delivery{
		Kind: platform.KindInbound, Tenant: p.tenants[ti], Platform: benchPlatformName,
		SessionKey: s.key, ChatID: s.source.ChatID, Event: ev, Received: now,
	}
}

// allocBytesPerEvent measures what next itself allocates per event (the
// event and its text), which the relay's figure excludes.
func (p *benchPublisher) allocBytesPerEvent(n int) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		benchSinkDelivery = p.next(i)
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
}

// benchSinkDelivery keeps allocBytesPerEvent's work from being optimized away.
var benchSinkDelivery platform.Delivery

// benchMetrics implements relay.Metrics to follow the relay from outside:
// live connections, and each tenant's ledger size (entries published and not
// yet acknowledged), summed into inFlight.
type benchMetrics struct {
	conns        atomic.Int64
	connsChanged chan struct{} // capacity 1: conns changed
	ledger       map[string]*atomic.Int64
	inFlight     atomic.Int64
	acked        chan struct{} // capacity 1: some ledger shrank
	// deadline bounds one waitInFlightBelow; reused so waiting allocates
	// nothing the per-event figure would count.
	deadline *time.Timer
}

func newBenchMetrics(tenants []string) *benchMetrics {
	m := &benchMetrics{
		ledger:       make(map[string]*atomic.Int64, len(tenants)),
		connsChanged: make(chan struct{}, 1),
		acked:        make(chan struct{}, 1),
		deadline:     time.NewTimer(benchWait),
	}
	for _, t := range tenants {
		m.ledger[t] = new(atomic.Int64)
	}
	return m
}

func benchNotify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (m *benchMetrics) ConnOpened(string) { m.conns.Add(1); benchNotify(m.connsChanged) }

func (m *benchMetrics) ConnClosed(string) { m.conns.Add(-1); benchNotify(m.connsChanged) }

func (m *benchMetrics) Refused(string) {}

func (m *benchMetrics) FrameIgnored(string, string) {}

func (m *benchMetrics) Inbound(string, string, string) {}

func (m *benchMetrics) Delivered(string, time.Duration) {}

func (m *benchMetrics) Outbound(string, string, string, time.Duration) {}

// Buffered is called under the tenant's lock after every ledger change, so
// the swaps of one tenant happen in order.
func (m *benchMetrics) Buffered(tenant string, n int) {
	l := m.ledger[tenant]
	if l == nil {
		return
	}
	old := l.Swap(int64(n))
	m.inFlight.Add(int64(n) - old)
	if int64(n) < old {
		benchNotify(m.acked)
	}
}

// waitInFlightBelow waits until fewer than n events are unacknowledged.
func (m *benchMetrics) waitInFlightBelow(b testing.TB, n int) {
	if m.inFlight.Load() < int64(n) {
		return
	}
	m.deadline.Reset(benchWait)
	defer m.deadline.Stop()
	for m.inFlight.Load() >= int64(n) {
		select {
		case <-m.acked:
		case <-m.deadline.C:
			b.Fatalf("%d events still unacknowledged after %s", m.inFlight.Load(), benchWait)
		}
	}
}

// benchChild is the gateway process, driven over its stdin and stdout.
type benchChild struct {
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func startBenchChild(b testing.TB, relayURL string) *benchChild {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchGatewayProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), benchChildEnv+"="+relayURL)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start gateway process: %v", err)
	}
	b.Cleanup(func() {
		_ = stdin.Close() // the child exits at end of input
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("gateway process: %v", err)
			}
		case <-time.After(benchWait):
			_ = cmd.Process.Kill()
			b.Errorf("gateway process did not exit")
		}
	})
	return &benchChild{stdin: stdin, lines: bufio.NewScanner(stdout)}
}

// call sends one command and returns the fields of the child's answer
// starting with want; other output (the test framework's) is skipped.
func (c *benchChild) call(b testing.TB, cmd, want string) []string {
	b.Helper()
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		b.Fatalf("gateway process: %v", err)
	}
	for c.lines.Scan() {
		f := strings.Fields(c.lines.Text())
		if len(f) > 0 && f[0] == "error" {
			b.Fatalf("gateway process: %s", c.lines.Text())
		}
		if len(f) > 0 && f[0] == want {
			return f[1:]
		}
	}
	b.Fatalf("gateway process ended before answering %q: %v", cmd, c.lines.Err())
	return nil
}

// connect dials gateways from..to-1, sends hello on each and waits for the
// descriptors; it returns how long that took.
func (c *benchChild) connect(b testing.TB, from, to int) time.Duration {
	b.Helper()
	f := c.call(b, fmt.Sprintf("connect %d %d", from, to), "connected")
	ns, _ := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns)
}

func (c *benchChild) closeAll(b testing.TB) {
	b.Helper()
	c.call(b, "close", "closed")
}

// benchStats are the child's latency figures since its last report.
type benchStats struct {
	count         int
	p50, p99, max time.Duration
}

func (c *benchChild) report(b testing.TB) benchStats {
	b.Helper()
	f := c.call(b, "report", "stats")
	var v [4]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i], 10, 64)
	}
	return benchStats{count: int(v[0]), p50: time.Duration(v[1]), p99: time.Duration(v[2]), max: time.Duration(v[3])}
}

// TestBenchGatewayProcess is the gateway side of the benchmarks, run only in
// the child process they start. Commands, one per stdin line:
//
//	connect FROM TO  dial gw<FROM>..gw<TO-1>, hello, then read and ack
//	                 inbound forever  -> "connected <ns>"
//	report           latencies read since the last report
//	                 -> "stats <count> <p50 ns> <p99 ns> <max ns>"
//	close            close every connection -> "closed"
//
// Failures answer "error <text>".
func TestBenchGatewayProcess(t *testing.T) {
	url := os.Getenv(benchChildEnv)
	if url == "" {
		t.Skip("the gateway side of the relay benchmarks; runs only in the process they start")
	}
	raiseFileLimit(t)
	g := &benchGateways{url: url}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "connect":
			from, _ := strconv.Atoi(f[1])
			to, _ := strconv.Atoi(f[2])
			start := time.Now()
			if err := g.connect(from, to); err != nil {
				fmt.Printf("error %v\n", err)
				continue
			}
			fmt.Printf("connected %d\n", time.Since(start).Nanoseconds())
		case "report":
			st := g.report()
			fmt.Printf("stats %d %d %d %d\n", st.count, st.p50, st.p99, st.max)
		case "close":
			g.closeAll()
			fmt.Println("closed")
		default:
			fmt.Printf("error unknown command %q\n", f[0])
		}
	}
	g.closeAll()
}

// benchGateways are the child's gateway connections and the latencies they
// observed.
type benchGateways struct {
	url     string
	clients []*relaytest.Client
	readers sync.WaitGroup

	mu        sync.Mutex
	latencies []time.Duration
}

// connectWorkers is how many gateways dial at once.
const connectWorkers = 8

func (g *benchGateways) connect(from, to int) error {
	clients := make([]*relaytest.Client, to-from)
	errs := make(chan error, connectWorkers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range connectWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(clients) {
					return
				}
				c, err := g.dial(from + i)
				if err != nil {
					errs <- err
					return
				}
				clients[i] = c
			}
		})
	}
	wg.Wait()
	close(errs)
	for _, c := range clients {
		if c != nil {
			g.clients = append(g.clients, c)
			g.readers.Go(func() { g.read(c) })
		}
	}
	return <-errs // nil when the channel is empty
}

func (g *benchGateways) dial(i int) (*relaytest.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), benchWait)
	defer cancel()
	id := "gw" + strconv.Itoa(i)
	c, err := relaytest.Dial(ctx, g.url, relaytest.Token(id, benchSecret, time.Now()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", id, err)
	}
	if _, err := c.Hello(ctx, benchPlatformName, ""); err != nil {
		_ = c.CloseNow()
		return nil, fmt.Errorf("hello %s: %w", id, err)
	}
	return c, nil
}

// read records each inbound frame's latency and acknowledges it, as the
// gateway does, until the connection ends.
func (g *benchGateways) read(c *relaytest.Client) {
	ctx := context.Background()
	for {
		f, err := c.Next(ctx, contract.TypeInbound)
		if err != nil {
			return
		}
		now := time.Now()
		if stamp, ok := parseBenchStamp(f.Event.Text); ok {
			g.mu.Lock()
			g.latencies = append(g.latencies, now.Sub(time.Unix(0, stamp)))
			g.mu.Unlock()
		}
		if err := c.Ack(ctx, f.BufferID); err != nil {
			return
		}
	}
}

// parseBenchStamp reads the publish time from "t=<unix ns> …".
func parseBenchStamp(text string) (int64, bool) {
	rest, ok := strings.CutPrefix(text, "t=")
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, " ")
	ns, err := strconv.ParseInt(digits, 10, 64)
	return ns, err == nil
}

func (g *benchGateways) report() benchStats {
	g.mu.Lock()
	l := g.latencies
	g.latencies = nil
	g.mu.Unlock()
	if len(l) == 0 {
		return benchStats{}
	}
	slices.Sort(l)
	at := func(q float64) time.Duration { return l[min(len(l)-1, int(q*float64(len(l))))] }
	return benchStats{count: len(l), p50: at(0.50), p99: at(0.99), max: l[len(l)-1]}
}

func (g *benchGateways) closeAll() {
	for _, c := range g.clients {
		_ = c.Close()
	}
	g.readers.Wait()
	g.clients = nil
}
