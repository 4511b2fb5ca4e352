package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"connector/platform/whatsapp"
)

// readyWait bounds the wait for a connector process to answer /readyz
// (it reads every gateway of the run from its config file first).
const readyWait = 2 * time.Minute

// stopWait bounds the wait for a connector process to exit after SIGTERM
// before it is killed.
const stopWait = 20 * time.Second

// instance is one connector process of a run on connector processes: the
// real binary, serve with store.backend redis, its public and operations
// listeners on loopback ports of its own.
type instance struct {
	name     string
	cmd      *exec.Cmd
	exited   chan struct{}
	log      string // its stderr and stdout, in the run's directory
	baseURL  string // http://… of the public listener
	relayURL string // ws://…/relay
	opsURL   string // http://… of the operations listener
}

// writeInstanceConfig writes the config file every connector process of
// the run reads: o's tenants and gateways (every gateway with o's secret),
// the redis store, the WhatsApp platform wa (a business number per tenant,
// its credentials left to the environment) and quiet logs. Listen
// addresses, instance name and Redis URL come from each process's
// environment.
func writeInstanceConfig(path string, o *options, wa whatsapp.Config) error {
	type gateway struct {
		ID      string   `yaml:"id"`
		Secrets []string `yaml:"secrets,flow"`
	}
	type tenant struct {
		ID          string    `yaml:"id"`
		MaxGateways int       `yaml:"max_gateways,omitempty"`
		Gateways    []gateway `yaml:"gateways"`
	}
	ids := tenantIDs(o.Tenants)
	tenants := make([]tenant, len(ids))
	for i, id := range ids {
		tenants[i].ID = id
	}
	for i := range o.Gateways {
		t := &tenants[i%len(tenants)]
		t.Gateways = append(t.Gateways, gateway{ID: o.gatewayID(i), Secrets: []string{o.Secret}})
	}
	for i := range tenants {
		if n := len(tenants[i].Gateways); n > defaultMaxGateways {
			tenants[i].MaxGateways = n
		}
	}
	st := map[string]string{"backend": "redis"}
	if o.LeaseTTL > 0 {
		st["lease_ttl"] = o.LeaseTTL.String()
	}
	doc := map[string]any{
		"log":   map[string]string{"level": "warn", "format": "json"},
		"store": st,
		"whatsapp": map[string]any{
			"api_url": wa.APIURL, "phone_numbers": wa.PhoneNumbers, "allow_all_users": true,
		},
		"tenants": tenants,
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// defaultMaxGateways is a tenant's max_gateways when the config leaves it
// out (registry.DefaultMaxGateways).
const defaultMaxGateways = 100

// startInstance starts connector process i of the run in dir with the
// config file config; env carries the platform credentials.
func startInstance(o *options, dir, config string, i int, env []string) (*instance, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	in := &instance{
		name:    "rb-i" + strconv.Itoa(i),
		log:     filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)),
		baseURL: "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		opsURL:  "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		exited:  make(chan struct{}),
	}
	in.relayURL = "ws://127.0.0.1:" + strconv.Itoa(ports[0]) + "/relay"
	dataDir := filepath.Join(dir, "data-"+strconv.Itoa(i))
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		return nil, err
	}
	logFile, err := os.Create(in.log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	in.cmd = exec.Command(o.Connector, "serve", "-config", config, "-data-dir", dataDir)
	in.cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dataDir,
		"CONNECTOR_LISTEN=127.0.0.1:" + strconv.Itoa(ports[0]),
		"CONNECTOR_OPS_LISTEN=127.0.0.1:" + strconv.Itoa(ports[1]),
		"CONNECTOR_INSTANCE=" + in.name,
		"CONNECTOR_REDIS_URL=" + o.RedisURL,
	}, env...)
	in.cmd.Stdout, in.cmd.Stderr = logFile, logFile
	in.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := in.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start connector process %s: %w", in.name, err)
	}
	go func() {
		_ = in.cmd.Wait()
		close(in.exited)
	}()
	return in, nil
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitReady waits until the process answers /readyz with 200.
func (in *instance) waitReady() error {
	deadline := time.Now().Add(readyWait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(in.opsURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-in.exited:
			return fmt.Errorf("connector process %s exited before it was ready: %s", in.name, in.logTail())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connector process %s not ready after %v: %s", in.name, readyWait, in.logTail())
		}
	}
}

// logTail is the end of the process's log.
func (in *instance) logTail() string {
	b, err := os.ReadFile(in.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop ends the process as an operator would (SIGTERM: gateways closed
// 1001), killing it when it has not exited within stopWait.
func (in *instance) stop() error {
	select {
	case <-in.exited:
		return nil
	default:
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
		return nil
	case <-time.After(stopWait):
		_ = in.cmd.Process.Kill()
		<-in.exited
		return fmt.Errorf("connector process %s did not exit %v after SIGTERM; killed", in.name, stopWait)
	}
}

// procMem is a process's memory: Go heap and stacks in use, goroutines,
// resident set; Collected says whether a garbage collection ran after the
// state it describes came about (else the heap holds garbage too).
type procMem struct {
	Heap, Stack, Goroutines, RSS float64
	Collected                    bool
}

// instanceSample is what a connector process's /metrics say.
type instanceSample struct {
	mem   procMem
	gcs   uint64 // garbage collections since start
	conns int    // gateway connections
	fds   int    // open files
}

// sample scrapes the process's /metrics.
func (in *instance) sample() (instanceSample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.opsURL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		select {
		case <-in.exited:
			return instanceSample{}, fmt.Errorf("connector process %s exited: %s", in.name, in.logTail())
		default:
		}
		return instanceSample{}, fmt.Errorf("scrape %s: %w", in.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return instanceSample{}, fmt.Errorf("scrape %s: %s", in.name, resp.Status)
	}
	fams, err := parseMetrics(resp.Body)
	if err != nil {
		return instanceSample{}, fmt.Errorf("scrape %s: %w", in.name, err)
	}
	return instanceSample{
		mem: procMem{
			Heap: metricSum(fams, "go_memstats_heap_inuse_bytes"), Stack: metricSum(fams, "go_memstats_stack_inuse_bytes"),
			Goroutines: metricSum(fams, "go_goroutines"), RSS: metricSum(fams, "process_resident_memory_bytes"),
		},
		gcs:   uint64(metricSum(fams, "go_gc_duration_seconds")),
		conns: int(metricSum(fams, "connector_gateway_connections")),
		fds:   int(metricSum(fams, "process_open_fds")),
	}, nil
}

// parseMetrics reads the Prometheus text format.
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// metricSum adds up every series of the family name: a gauge's or
// counter's values, a summary's or histogram's sample counts.
func metricSum(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		switch {
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Summary != nil:
			sum += float64(m.GetSummary().GetSampleCount())
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// residentBytes is the resident set of process pid ("self" for this one)
// from /proc, 0 where it cannot be read.
func residentBytes(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nVmRSS:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	f := bytes.Fields(line) // "12345 kB"
	if len(f) < 1 {
		return 0
	}
	kb, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return 0
	}
	return kb << 10
}

// openFiles is how many files process pid has open, -1 where it cannot be
// read.
func openFiles(pid int) int {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}
