package main

import (
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"
)

// print writes the report of a run on connector processes; nothing when r
// is nil.
func (r *procResult) print(w io.Writer) {
	if r == nil {
		return
	}
	o := &r.Opts
	rate := "as fast as 16 webhook workers go"
	if o.Rate > 0 {
		rate = fmt.Sprintf("%g/s", o.Rate)
	}
	spread := "spread over all connector processes"
	if o.Affinity {
		spread = "each on one connector process"
	}
	fmt.Fprintf(w, "relaybench: %d connector processes (%s, store redis), driver=idle gateways=%d tenants=%d (gateways of a tenant %s) gateway processes=%d\n",
		o.Instances, o.Connector, o.Gateways, o.Tenants, spread, o.Clients)
	fmt.Fprintf(w, "machine:    %d CPUs, %s/%s, %s, open-file limit %d, load average %s before, %s after\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), fileLimit(), r.LoadBefore, orNA(r.LoadAfter))
	if r.Ready > 0 {
		fmt.Fprintf(w, "start:      %d connector processes ready in %s (each reads the %d gateways from its config file)\n", o.Instances, round(r.Ready), o.Gateways)
	}
	if r.Connected == 0 && r.ConnectFailed == 0 {
		return
	}
	per := o.Sources / o.Clients
	fmt.Fprintf(w, "connect:    %d gateways in %s (%.0f/s) from %d gateway processes (source addresses 127.0.0.2-127.0.0.%d, %d each), %d failed\n",
		r.Connected, round(r.ConnectTime), perSecond(r.Connected, r.ConnectTime), o.Clients, 1+o.Sources, per, r.ConnectFailed)
	if len(r.Instances) == 0 {
		return
	}
	maxFiles := 0
	for _, in := range r.Instances {
		maxFiles = max(maxFiles, in.Files)
	}
	fmt.Fprintf(w, "open files: at most %d in a connector process, %d in a gateway process (limit %d)\n", maxFiles, r.MaxClientFiles, fileLimit())
	fmt.Fprintf(w, "broken:     %d gateway connections ended before the events\n", r.Broken)

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "per connection\tconnections\theap+stacks\theap\tstacks\tgoroutines\tresident\tread after a GC\t")
	var conn, echo memGrowth
	for _, in := range r.Instances {
		g := growth(in.Before, in.After, in.Conns)
		conn.add(g)
		printGrowth(tw, in.Name, g)
	}
	printGrowth(tw, "connector processes", conn)
	for _, e := range r.Echo {
		echo.add(growth(e.Before, e.After, e.Conns))
	}
	if len(r.Echo) > 0 {
		printGrowth(tw, fmt.Sprintf("echo processes (%d)", len(r.Echo)), echo)
	}
	_ = tw.Flush()
	if echo.conns > 0 && echo.heapStacks() > 0 && echo.rss > 0 {
		fmt.Fprintf(w, "connector/echo per connection: heap+stacks %.2fx, resident %.2fx\n",
			conn.heapStacks()/echo.heapStacks(), conn.rss/echo.rss)
	}
	fmt.Fprintln(w)

	rb, rc, re := r.Redis.Before, r.Redis.Connected, r.Redis.AfterEvents
	if rc.UsedMemory > 0 && r.Connected > 0 {
		perGateway := func(a, z int64) float64 { return float64(z-a) / float64(r.Connected) }
		fmt.Fprintf(w, "redis:      used_memory %s before, %s with the gateways connected: %+.0f B per gateway, of which data %+.0f B (%d keys, %+.3f per gateway) and client buffers %+.0f B\n",
			mib(rb.UsedMemory), mib(rc.UsedMemory), perGateway(rb.UsedMemory, rc.UsedMemory),
			perGateway(rb.Dataset, rc.Dataset), rc.Keys, perGateway(rb.Keys, rc.Keys), perGateway(rb.Clients, rc.Clients))
		if re.UsedMemory > 0 {
			fmt.Fprintf(w, "            after the events: used_memory %s, data %s, %d keys\n", mib(re.UsedMemory), mib(re.Dataset), re.Keys)
		}
		if r.Redis.IdleCommands > 0 {
			fmt.Fprintf(w, "            %.0f commands/s while the gateways were idle, %.0f of them PUBLISH\n", r.Redis.IdleCommands, r.Redis.IdlePublish)
		}
	}
	fmt.Fprintln(w, "cores busy:")
	printCores(w, "connecting", r.Connecting)
	printCores(w, "idle", r.Idle)
	printCores(w, "events", r.Events)
	if e := r.Event; e != nil {
		fmt.Fprintf(w, "\none event to every tenant: a signed WhatsApp message to each tenant's number, POSTed round-robin to the connector processes at %s;\n", rate)
		fmt.Fprintln(w, "latency from the POST's scheduled time to a gateway's read, over all tenants:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "\tsent\treceived\tlost\terrors\tall read after\tp50\tp90\tp99\tmax\t")
		fmt.Fprintf(tw, "event per tenant\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", e.Sent, e.Received, e.Lost(), e.Errors,
			round(e.Elapsed), round(e.P50), round(e.P90), round(e.P99), round(e.Max))
		if a := r.Answered; a != nil && a.Received > 0 {
			fmt.Fprintf(tw, "webhook answered (from its POST)\t%d\t\t\t\t\t%s\t%s\t%s\t%s\t\n", a.Received,
				round(a.P50), round(a.P90), round(a.P99), round(a.Max))
		}
		_ = tw.Flush()
	}
}

// printCores prints the cores each kind of process kept busy in a phase.
func printCores(w io.Writer, phase string, c cpuUse) {
	if c.Span <= 0 {
		return
	}
	f := func(x float64) string {
		if x < 0 {
			return "unknown"
		}
		return fmt.Sprintf("%.2f", x)
	}
	fmt.Fprintf(w, "  %-11s %8s: connector processes %s, redis-server %s, gateway processes %s, other processes %s\n",
		phase, round(c.Span), f(c.Instances), f(c.Redis), f(c.Gateways), f(c.Others))
}

// memGrowth is memory growth per connection, or its sum over processes.
type memGrowth struct {
	conns                        int
	heap, stack, goroutines, rss float64 // per connection
	collected, processes         int
}

// growth is the growth from a to z over n connections; it counts as
// collected when both were read after a garbage collection.
func growth(a, z procMem, n int) memGrowth {
	g := memGrowth{conns: n, processes: 1}
	if a.Collected && z.Collected {
		g.collected = 1
	}
	if n == 0 {
		return g
	}
	d := func(x, y float64) float64 { return (y - x) / float64(n) }
	g.heap, g.stack, g.goroutines, g.rss = d(a.Heap, z.Heap), d(a.Stack, z.Stack), d(a.Goroutines, z.Goroutines), d(a.RSS, z.RSS)
	return g
}

// add folds g into the total s: per-connection figures weighted by
// connections.
func (s *memGrowth) add(g memGrowth) {
	n := s.conns + g.conns
	if n == 0 {
		return
	}
	w := func(x, y float64) float64 { return (x*float64(s.conns) + y*float64(g.conns)) / float64(n) }
	s.heap, s.stack, s.goroutines, s.rss = w(s.heap, g.heap), w(s.stack, g.stack), w(s.goroutines, g.goroutines), w(s.rss, g.rss)
	s.conns = n
	s.collected += g.collected
	s.processes += g.processes
}

func (s memGrowth) heapStacks() float64 { return s.heap + s.stack }

func printGrowth(w io.Writer, name string, g memGrowth) {
	gc := "yes"
	if g.collected < g.processes {
		gc = fmt.Sprintf("%d of %d", g.collected, g.processes)
		if g.processes == 1 {
			gc = "no: the heap includes garbage"
		}
	}
	fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%.2f\t%s\t%s\t\n", name, g.conns, kib(g.heapStacks()), kib(g.heap), kib(g.stack), g.goroutines, kib(g.rss), gc)
}

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}
