package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"connector/internal/redistest"
)

// TestMain lets the test binary play the gateway process that run starts
// (this executable re-executed with RELAYBENCH_ROLE=fleet).
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == roleFleet {
		os.Exit(fleetMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// benchOptions are a short in-process run: 100 events at 200/s.
func benchOptions(t *testing.T, args ...string) options {
	t.Helper()
	base := []string{"-gateways", "4", "-tenants", "2", "-rate", "200", "-duration", "500ms", "-window", "64"}
	o, err := parseOptions(append(base, args...), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// checkEventRun asserts that every event was sent, read by a gateway and
// echoed, with nothing lost and no errors.
func checkEventRun(t *testing.T, res *result, wantEvents int) {
	t.Helper()
	if res.Connected != 4 || res.ConnectFailed != 0 {
		t.Fatalf("connected %d, failed %d; want 4, 0", res.Connected, res.ConnectFailed)
	}
	for name, s := range map[string]*stats{"connector": res.Connector, "echo": res.Echo} {
		if s == nil {
			t.Fatalf("no %s stats", name)
		}
		if s.Sent != wantEvents || s.Received != wantEvents || s.Lost() != 0 || s.Errors != 0 {
			t.Errorf("%s: sent %d received %d lost %d errors %d; want %d sent and received, none lost or failed",
				name, s.Sent, s.Received, s.Lost(), s.Errors, wantEvents)
		}
		if s.P50 <= 0 || s.P50 > s.P90 || s.P90 > s.P99 || s.P99 > s.Max {
			t.Errorf("%s: latencies not ordered: %+v", name, s)
		}
		if s.AvgBytes() < 100 {
			t.Errorf("%s: frames of %d bytes, want a whole inbound frame", name, s.AvgBytes())
		}
	}
	if res.Echo.AvgBytes() < res.Connector.AvgBytes() {
		t.Errorf("echo messages of %d bytes, smaller than the connector's %d-byte frames",
			res.Echo.AvgBytes(), res.Connector.AvgBytes())
	}
	if m := res.Memory; m == nil || m.Goroutines < 1 || m.total() <= 0 {
		t.Errorf("connector memory per connection %+v, want goroutines and bytes", m)
	}
	if m := res.EchoMemory; m == nil || m.Goroutines < 1 {
		t.Errorf("echo memory per connection %+v, want its goroutine", m)
	}
}

func TestSyntheticRun(t *testing.T) {
	o := benchOptions(t)
	res, err := run(&o)
	if err != nil {
		t.Fatal(err)
	}
	checkEventRun(t, res, 100)

	var out bytes.Buffer
	res.print(&out)
	for _, want := range []string{"driver=synthetic gateways=4 tenants=2 rate=200/s", "connect:    4 gateways",
		"memory:     connector", "connector (one way)", "echo (round trip)", "connector/echo: throughput"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), o.Secret) {
		t.Errorf("report shows the gateway secret:\n%s", out.String())
	}
}

func TestNexscopeRun(t *testing.T) {
	o := benchOptions(t, "-driver", "nexscope")
	res, err := run(&o)
	if err != nil {
		t.Fatal(err)
	}
	checkEventRun(t, res, 100)
}

func TestDiscordRun(t *testing.T) {
	o := benchOptions(t, "-driver", "discord")
	res, err := run(&o)
	if err != nil {
		t.Fatal(err)
	}
	checkEventRun(t, res, 100)
}

func TestSlackRun(t *testing.T) {
	o := benchOptions(t, "-driver", "slack")
	res, err := run(&o)
	if err != nil {
		t.Fatal(err)
	}
	checkEventRun(t, res, 100)
}

// A run against a connector by URL connects with the operator's gateway
// ids and secret and reports the connection figures it can see.
func TestIdleRunAgainstURL(t *testing.T) {
	server := benchOptions(t, "-driver", "idle", "-secret", "shared-secret", "-gateway-prefix", "ops-")
	c, err := startConnector(&server, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()

	o := benchOptions(t, "-driver", "idle", "-secret", "shared-secret", "-gateway-prefix", "ops-", "-url", c.RelayURLs[0])
	res, err := run(&o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Connected != 4 || res.Memory != nil || res.Connector != nil || res.EchoMemory == nil {
		t.Fatalf("result %+v: want 4 connected, echo memory only", res)
	}
	if err := c.waitConns(0, 10*time.Second); err != nil {
		t.Fatalf("gateways still connected after the run: %v", err)
	}
}

func TestIdleRunWrongSecretFails(t *testing.T) {
	server := benchOptions(t, "-driver", "idle", "-secret", "right")
	c, err := startConnector(&server, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	o := benchOptions(t, "-driver", "idle", "-secret", "wrong", "-url", c.RelayURLs[0])
	if _, err := run(&o); err == nil || !strings.Contains(err.Error(), "no gateway connected") {
		t.Fatalf("run with a wrong secret: %v, want no gateway connected", err)
	}
}

func TestOptionsRejectBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-gateways", "0"}, "-gateways"},
		{[]string{"-gateways", "2", "-tenants", "3"}, "-tenants"},
		{[]string{"-rate", "-1"}, "-rate"},
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-window", "0"}, "-window"},
		{[]string{"-driver", "carrier-pigeon"}, "-driver"},
		{[]string{"-url", "ws://127.0.0.1:1/relay", "-driver", "idle"}, "-secret"},
		{[]string{"-url", "ws://127.0.0.1:1/relay", "-secret", "s"}, "-driver"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-store", "floppy"}, "-store"},
		{[]string{"-store", "redis"}, "-redis-url"},
		{[]string{"-instances", "0"}, "-instances"},
		{[]string{"-instances", "3"}, "-instances"},
		{[]string{"-instances", "3", "-store", "embedded"}, "-instances"},
		{[]string{"-redis-min-replicas", "1"}, "-redis-min-replicas"},
		{[]string{"-redis-min-replicas", "-1", "-store", "redis", "-redis-url", "redis://127.0.0.1:1/0"}, "-redis-min-replicas"},
		{[]string{"-store", "embedded", "-url", "ws://127.0.0.1:1/relay", "-secret", "s", "-driver", "idle"}, "-store"},
		{[]string{"-producers", "0"}, "-producers"},
		{[]string{"-producers", "4", "-driver", "nexscope"}, "-producers"},
	} {
		_, err := parseOptions(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

func TestStatsFieldsRoundTrip(t *testing.T) {
	in := stats{Sent: 10, Received: 9, Errors: 1, Bytes: 4000, Elapsed: time.Second,
		P50: time.Millisecond, P90: 2 * time.Millisecond, P99: 3 * time.Millisecond, Max: time.Second}
	out, err := parseStats(strings.Fields(in.fields()))
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, in)
	}
	if _, err := parseStats([]string{"1", "2"}); err == nil {
		t.Fatal("parseStats accepted 2 fields")
	}
	if in.Lost() != 1 || in.AvgBytes() != 444 || in.PerSecond() != 9 {
		t.Fatalf("lost %d avg %d rate %g", in.Lost(), in.AvgBytes(), in.PerSecond())
	}
}

func TestStamp(t *testing.T) {
	at := time.Unix(1_700_000_000, 123456789)
	text := append([]byte("/ask "), appendStamp(nil, at)...)
	text = append(text, messageBody...)
	got, ok := parseStamp(text)
	if !ok || !got.Equal(at) {
		t.Fatalf("parseStamp(%q) = %v, %v; want %v", text, got, ok, at)
	}
	for _, bad := range []string{"", "no stamp here", "rb=", "rb=x1"} {
		if _, ok := parseStamp([]byte(bad)); ok {
			t.Errorf("parseStamp(%q) found a stamp", bad)
		}
	}
}

// Every store backend carries a short run with nothing lost, and a run on
// a durable backend is compared with the memory store in the same run.
func TestStoreRuns(t *testing.T) {
	for _, backend := range []string{"memory", "embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			args := []string{"-store", backend, "-store-dir", t.TempDir(), "-producers", "8"}
			if backend == "redis" {
				args = append(args, "-redis-url", redistest.Start(t, redistest.Options{}).URL())
			}
			o := benchOptions(t, args...)
			res, err := run(&o)
			if err != nil {
				t.Fatal(err)
			}
			checkEventRun(t, res, 100)
			if backend == "memory" {
				if res.MemoryStore != nil {
					t.Fatalf("a memory run measured a memory baseline too: %+v", res.MemoryStore)
				}
				return
			}
			if b := res.MemoryStore; b == nil || b.Sent != 100 || b.Received != 100 || b.Lost() != 0 || b.Errors != 0 {
				t.Fatalf("memory baseline %+v: want 100 sent and received, none lost or failed", b)
			}
			var out bytes.Buffer
			res.print(&out)
			for _, want := range []string{"store=" + backend, "memory store (one way)", backend + "/memory store: throughput"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// Three instances on one redis store carry a run with nothing lost: the
// gateways are spread over them and each ingests a third of the events,
// so most events cross from the ingesting instance to the tenant's driver
// and on to the instance holding the socket.
func TestThreeInstancesOnRedis(t *testing.T) {
	url := redistest.Start(t, redistest.Options{}).URL()
	o := benchOptions(t, "-store", "redis", "-redis-url", url, "-instances", "3", "-producers", "8")
	res, err := run(&o)
	if err != nil {
		t.Fatal(err)
	}
	checkEventRun(t, res, 100)
	var out bytes.Buffer
	res.print(&out)
	if !strings.Contains(out.String(), "instances=3") {
		t.Errorf("report lacks instances=3:\n%s", out.String())
	}
}

// The embedded store's data directory lives for the run only.
func TestEmbeddedStoreDirRemoved(t *testing.T) {
	dir := t.TempDir()
	o := benchOptions(t, "-store", "embedded", "-store-dir", dir, "-echo=false")
	if _, err := run(&o); err != nil {
		t.Fatal(err)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("store directory holds %v (%v) after the run, want nothing", left, err)
	}
}
