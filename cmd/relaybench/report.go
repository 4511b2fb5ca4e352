package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"text/tabwriter"
	"time"
)

// print writes the human-readable report; nothing when r is nil.
func (r *result) print(w io.Writer) {
	if r == nil {
		return
	}
	o := &r.Opts
	rate := "max"
	if o.Rate > 0 {
		rate = fmt.Sprintf("%g/s", o.Rate)
	}
	target := "in-process connector"
	if o.URL != "" {
		target = o.URL
	}
	fmt.Fprintf(w, "relaybench: %s, driver=%s gateways=%d tenants=%d rate=%s duration=%s window=%d store=%s producers=%d instances=%d\n",
		target, o.Driver, o.Gateways, o.Tenants, rate, o.Duration, o.Window, o.Store, o.Producers, o.Instances)
	fmt.Fprintf(w, "machine:    %d CPUs, %s/%s, %s, open-file limit %d, load average %s\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), fileLimit(), loadAverage())
	if r.Connected > 0 || r.ConnectFailed > 0 {
		fmt.Fprintf(w, "connect:    %d gateways in %s (%s each, %.0f/s) from %d source addresses, %d failed\n", r.Connected,
			round(r.ConnectTime), round(r.ConnectTime/time.Duration(max(1, r.Connected))), perSecond(r.Connected, r.ConnectTime),
			max(1, o.Sources), r.ConnectFailed)
	}
	if r.EchoConnect > 0 {
		fmt.Fprintf(w, "            %d echo connections in %s (%.0f/s, one at a time)\n", r.Connected, round(r.EchoConnect),
			perSecond(r.Connected, r.EchoConnect))
	}
	printMemory(w, "memory:     connector", r.Memory)
	printMemory(w, "            echo     ", r.EchoMemory)
	if r.Memory != nil && r.EchoMemory != nil && r.EchoMemory.total() > 0 {
		fmt.Fprintf(w, "            connector/echo memory per connection: %.2fx\n", r.Memory.total()/r.EchoMemory.total())
	}
	if r.Connector == nil {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tsent\treceived\tlost\terrors\tper second\tp50\tp90\tp99\tmax\tframe bytes\t")
	if r.MemoryStore != nil {
		printRow(tw, "memory store (one way)", r.MemoryStore)
	}
	printRow(tw, "connector (one way)", r.Connector)
	if r.Echo != nil {
		printRow(tw, "echo (round trip)", r.Echo)
	}
	_ = tw.Flush()
	if r.MemoryStore != nil {
		fmt.Fprintf(w, "other processes kept %s busy during the memory store run, ", cores(r.MemoryStoreNoise))
	}
	fmt.Fprintf(w, "other processes kept %s busy during the connector run", cores(r.ConnectorNoise))
	if r.Echo != nil {
		fmt.Fprintf(w, ", %s during the echo run", cores(r.EchoNoise))
	}
	fmt.Fprintln(w)
	printCPU(w, r)
	if m := r.MemoryStore; m != nil {
		printRatio(w, o.Store+"/memory store", r.Connector, m)
	}
	if e := r.Echo; e != nil {
		printRatio(w, "connector/echo", r.Connector, e)
	}
}

// printCPU prints the CPU time relaybench's processes spent per event
// received in the connector and echo runs, and their ratio.
func printCPU(w io.Writer, r *result) {
	per := func(cpu time.Duration, s *stats) time.Duration {
		if cpu < 0 || s == nil || s.Received == 0 {
			return -1
		}
		return cpu / time.Duration(s.Received)
	}
	c := per(r.ConnectorCPU, r.Connector)
	if c < 0 {
		return
	}
	fmt.Fprintf(w, "CPU per event (this process and the gateways'): connector run %.1fµs%s", c.Seconds()*1e6, split(per(r.ConnectorSelfCPU, r.Connector), c))
	if e := per(r.EchoCPU, r.Echo); e > 0 {
		fmt.Fprintf(w, ", echo run %.1fµs%s (echo/connector %.2fx)", e.Seconds()*1e6, split(per(r.EchoSelfCPU, r.Echo), e), float64(e)/float64(c))
	}
	fmt.Fprintln(w)
}

// split is " (this process s, gateways all-s)", or "" when s is unknown.
func split(self, all time.Duration) string {
	if self < 0 {
		return ""
	}
	return fmt.Sprintf(" (this process %.1fµs, gateways %.1fµs)", self.Seconds()*1e6, (all-self).Seconds()*1e6)
}

// printRatio prints run c as a ratio of baseline b.
func printRatio(w io.Writer, label string, c, b *stats) {
	if b.PerSecond() <= 0 || b.P50 <= 0 {
		return
	}
	fmt.Fprintf(w, "%s: throughput %.2fx, p50 %.2fx, p99 %.2fx\n", label,
		c.PerSecond()/b.PerSecond(), float64(c.P50)/float64(b.P50), float64(c.P99)/float64(max(1, b.P99)))
}

func printRow(w io.Writer, name string, s *stats) {
	fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%d\t\n", name, s.Sent, s.Received, s.Lost(), s.Errors,
		s.PerSecond(), round(s.P50), round(s.P90), round(s.P99), round(s.Max), s.AvgBytes())
}

func printMemory(w io.Writer, label string, m *connMemory) {
	if m == nil {
		return
	}
	fmt.Fprintf(w, "%s %.1f KiB/conn (heap %.1f KiB, stacks %.1f KiB), %.1f goroutines/conn\n",
		label, m.total()/1024, m.HeapBytes/1024, m.StackBytes/1024, m.Goroutines)
}

// perSecond is n over d.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// total is heap plus stacks.
func (m *connMemory) total() float64 { return m.HeapBytes + m.StackBytes }

// cores formats a number of busy cores.
func cores(n float64) string {
	if n < 0 {
		return "an unknown number of cores"
	}
	return fmt.Sprintf("%.2f cores", n)
}

// round shortens d for display.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// loadAverage is the 1-minute load average at the end of the run ("n/a"
// where /proc/loadavg does not exist): other work on the machine skews every
// figure.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	one, _, _ := bytes.Cut(b, []byte(" "))
	return string(one)
}
