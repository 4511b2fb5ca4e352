package main

// Takeover at the default store.lease_ttl, with real processes: three
// connector instances on one redis-server, the holder of a tenant's lease
// (and whatever other leases it holds) killed with SIGKILL. The regression
// test asserts that another instance takes over (within crashWait); the
// times are logged, and CONNECTOR_TAKEOVER_RUNS repeats the kill for
// docs/durability.md. CONNECTOR_LEASE_SOAK runs three instances with many
// contested leases for a while and counts the takeovers, none of which
// should happen since no instance dies (docs/performance.md).

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/internal/redistest"
	"connector/store"
)

// takeoverLeases are the leases a killed instance may hold besides the
// tenant's: each must move to a survivor.
var takeoverLeases = []string{"ingest/telegram/poll", "ingest/discord/gateway", nexscopeRoomLease}

// onRedisDefaultTTL writes the rig's configuration on the redis at url
// with store.lease_ttl left at its default, edited by edit.
func onRedisDefaultTTL(t *testing.T, path, url string, edit func(string) string) string {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(doc), "tenants:\n", fmt.Sprintf("store: {backend: redis, redis_url: %q}\ntenants:\n", url), 1)
	out := filepath.Join(t.TempDir(), "redis-default-ttl.yaml")
	if err := os.WriteFile(out, []byte(edit(cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// setInstance names r's next process instance.
func setInstance(r *crashRig, name string) {
	env := slices.DeleteFunc(slices.Clone(r.env), func(e string) bool { return strings.HasPrefix(e, "CONNECTOR_INSTANCE=") })
	r.env = append(env, "CONNECTOR_INSTANCE="+name)
}

// TestTakeoverAtDefaultLeaseTTL kills, with SIGKILL, the instance driving
// tenant t1 among three on one redis-server, at the default lease_ttl: an
// interaction confirmed to a survivor right after the kill must reach a
// surviving gateway, and every other lease the killed instance held must
// move to a survivor. The kill comes at a random moment; the killed
// instance comes back under a new name and the kill repeats
// CONNECTOR_TAKEOVER_RUNS times (default 1); each run's times after the
// kill are logged, with how long each lease had left at the kill.
func TestTakeoverAtDefaultLeaseTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	runs := 1
	if v := os.Getenv("CONNECTOR_TAKEOVER_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CONNECTOR_TAKEOVER_RUNS=%q: want a count", v)
		}
		runs = n
	}
	rds := redistest.Start(t, redistest.Options{})
	bin := connectorBinary(t)
	base := newCrashRig(t, bin, true)
	base.config = onRedisDefaultTTL(t, base.config, rds.URL(), func(cfg string) string {
		return strings.Replace(cfg, "      - id: gw1\n", "      - id: gw2\n        secrets: [\"gw2-secret\"]\n      - id: gw3\n        secrets: [\"gw3-secret\"]\n      - id: gw1\n", 1)
	})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: rds.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })

	// i0 starts alone, so it holds every lease, and t1's first gateway is
	// on it; then i1 and i2 with a gateway each.
	rigs := make([]*crashRig, 3)
	gws := newGatewaySet(t)
	for i := range rigs {
		r := *base
		r.dir = t.TempDir()
		setInstance(&r, rigName(i))
		rigs[i] = &r
		startInstance(t, rigs[i])
		if i == 0 {
			gws.dial(t, rigs, 0, "gw1", crashGatewaySecret, "discord", "telegram")
			waitLeaseHolder(t, st, "relay/tenant/t1", "")
			for _, name := range takeoverLeases {
				waitLeaseHolder(t, st, name, "")
			}
		}
	}
	gws.dial(t, rigs, 1, "gw2", "gw2-secret", "discord", "telegram")
	gws.dial(t, rigs, 2, "gw3", "gw3-secret", "discord", "telegram")

	event := 0
	for run := range runs {
		driver := leaseHolder(st, "relay/tenant/t1")
		if driver == "" {
			t.Fatal("no instance drives t1 before the kill")
		}
		victim := instanceIndex(driver)
		other := (victim + 1) % 3
		// Steady state: an event reaches a gateway through the driver.
		confirmDiscordInteractions(t, rigs[other], event, event+1)
		gws.wait(t, event, event+1)
		event++
		var held []string
		for _, name := range takeoverLeases {
			if leaseHolder(st, name) == driver {
				held = append(held, name)
			}
		}

		// The kill comes at a random moment: the instances' renewals and
		// bids (every beat before store.Tenure) fall into step with the
		// test's own steps otherwise.
		time.Sleep(rand.N(5 * time.Second))
		left := map[string]time.Duration{}
		for _, name := range append([]string{"relay/tenant/t1"}, held...) {
			if l, ok, err := st.Leases().Holder(t.Context(), name); err == nil && ok {
				left[name] = time.Until(l.Expires)
			}
		}
		killed := time.Now()
		stopInstance(t, rigs[victim])
		moved := make(map[string]<-chan holderChange, len(held))
		for _, name := range held {
			moved[name] = watchHolder(st, name, driver, killed)
		}
		confirmDiscordInteractions(t, rigs[other], event, event+1)
		gws.wait(t, event, event+1)
		served := time.Since(killed)
		event++
		report := []string{fmt.Sprintf("tenant t1 served again after %v", served.Round(time.Millisecond))}
		for _, name := range held {
			select {
			case c := <-moved[name]:
				report = append(report, fmt.Sprintf("%s on %s after %v", name, c.holder, c.after.Round(time.Millisecond)))
			case <-time.After(crashWait):
				t.Fatalf("timed out after %v waiting for %s to leave the killed %s", crashWait, name, driver)
			}
		}
		t.Logf("run %d: %s (driver) killed: %s; the leases had %v left at the kill", run+1, driver, strings.Join(report, "; "), left)

		// The killed instance comes back under a new name (its old lease
		// records must not make it the holder again) with its gateways.
		setInstance(rigs[victim], fmt.Sprintf("i%dr%d", victim, run+1))
		startInstance(t, rigs[victim])
		for k := range gws.clients {
			if gws.on[k] == victim {
				gws.connect(t, k, rigs[victim], victim)
			}
		}
	}
}

// TestLeaseSoak runs three instances on one redis-server for
// CONNECTOR_LEASE_SOAK (a duration; skipped when unset) with many
// contested leases: 20 tenants with a gateway on every instance, 10
// nexscope rooms, the Telegram poll and the Discord Gateway. No instance
// dies or stops, so every lease acquired after the start is a false
// takeover (connector_lease_acquired_total), and every lease a holder
// found lost is one too (connector_lease_lost_total); the counts are
// logged, with the rate per hour. Run it on a loaded machine
// (docs/performance.md).
func TestLeaseSoak(t *testing.T) {
	soak := os.Getenv("CONNECTOR_LEASE_SOAK")
	if soak == "" {
		t.Skip("set CONNECTOR_LEASE_SOAK to a duration to count false takeovers")
	}
	window, err := time.ParseDuration(soak)
	if err != nil {
		t.Fatalf("CONNECTOR_LEASE_SOAK=%q: %v", soak, err)
	}
	const tenants, rooms = 20, 10
	rds := redistest.Start(t, redistest.Options{})
	bin := connectorBinary(t)
	base := newCrashRig(t, bin, true)
	base.config = onRedisDefaultTTL(t, base.config, rds.URL(), func(cfg string) string {
		var more strings.Builder
		for n := range tenants {
			fmt.Fprintf(&more, "  - id: s%d\n    gateways:\n", n)
			for k := range 3 {
				fmt.Fprintf(&more, "      - id: s%dg%d\n        secrets: [\"s%dg%d-secret\"]\n", n, k, n, k)
			}
		}
		cfg = strings.Replace(cfg, "discord:\n", more.String()+"discord:\n", 1)
		var rs strings.Builder
		rs.WriteString("  rooms: [{name: default, tenant: t1}")
		for n := range rooms {
			fmt.Fprintf(&rs, ", {name: r%d, tenant: t1}", n)
		}
		rs.WriteString("]\n")
		return strings.Replace(cfg, "  rooms: [{name: default, tenant: t1}]\n", rs.String(), 1)
	})
	rigs := make([]*crashRig, 3)
	for i := range rigs {
		r := *base
		r.dir = t.TempDir()
		setInstance(&r, rigName(i))
		rigs[i] = &r
		startInstance(t, rigs[i])
	}
	gws := newGatewaySet(t)
	for n := range tenants {
		for k := range 3 {
			gws.dial(t, rigs, k, fmt.Sprintf("s%dg%d", n, k), fmt.Sprintf("s%dg%d-secret", n, k), "telegram")
		}
	}
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: rds.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for n := range tenants {
		waitLeaseHolder(t, st, fmt.Sprintf("relay/tenant/s%d", n), "")
	}
	for n := range rooms {
		waitLeaseHolder(t, st, fmt.Sprintf("ingest/nexscope/room/r%d", n), "")
	}
	for _, name := range takeoverLeases {
		waitLeaseHolder(t, st, name, "")
	}

	count := func(name string) float64 {
		sum := 0.0
		for _, r := range rigs {
			select {
			case <-r.child.exited:
				t.Fatalf("an instance exited during the soak\n%s", tail(r.child.stderr.String(), 40))
			default:
			}
			sum += r.child.metric(t, name, "")
		}
		return sum
	}
	acquired0, lost0 := count("connector_lease_acquired_total"), count("connector_lease_lost_total")
	t.Logf("soaking %v: %d contested leases on 3 instances", window, tenants+rooms+len(takeoverLeases))
	time.Sleep(window) // the measurement window, not synchronisation
	acquired, lost := count("connector_lease_acquired_total")-acquired0, count("connector_lease_lost_total")-lost0
	perHour := float64(time.Hour) / float64(window)
	t.Logf("in %v: %v leases acquired (false takeovers, %.1f/h), %v found lost by their holder (%.1f/h)",
		window, acquired, acquired*perHour, lost, lost*perHour)
}
