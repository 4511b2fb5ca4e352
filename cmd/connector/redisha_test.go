package main

// Redis high-availability tests (issue 26): the connector binary runs on a
// Redis that loses its primary (Sentinel fails over to a replica) or goes
// away entirely for a while, under a steady stream of Telegram webhook
// updates posted the way Telegram does: one chat's next update only once
// the previous one was answered 200, an update refused sent again. Every
// update answered 200 must reach the gateway; the connector is never
// restarted. The figures go to docs/durability.md and docs/performance.md.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/contract"
	"connector/internal/redistest"
	"connector/relay/relaytest"
)

const (
	// haPassword is the Redis servers' password.
	haPassword = "ha-redis-pw-41d9"
	// haEvery paces each chat's sender: one update (or one more try)
	// every haEvery, so crashSessions chats send 50 updates a second.
	haEvery = 80 * time.Millisecond
	// haResumeBound is issue 26's bound on confirmations resuming after
	// the primary's kill.
	haResumeBound = 15 * time.Second
	// haDownFor is how long the whole Redis is away in the outage test.
	haDownFor = 30 * time.Second
	// haAfter is how many updates the producer gets confirmed after
	// confirmations resumed, before it stops.
	haAfter = 40
)

// TestRedisSentinelFailover: a primary, two replicas and three Sentinels;
// the connector on the pinned Sentinel configuration with
// redis_min_replicas 1. Under a steady stream of updates the primary is
// killed with SIGKILL: confirmations resume within 15 s, every confirmed
// update reaches the gateway, and the connector process is the same one.
func TestRedisSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and seven redis-server processes")
	}
	t.Parallel()
	primary := redistest.Start(t, redistest.Options{Password: haPassword})
	replicas := redistest.StartReplicas(t, primary, 2)
	sentinels := redistest.StartSentinels(t, primary, 2, 3, redistest.SentinelOptions{Master: "mymaster", DownAfter: time.Second})
	addrs := make([]string, len(sentinels))
	for i, s := range sentinels {
		addrs[i] = strconv.Quote(s.Addr())
	}
	s := startHAStream(t, fmt.Sprintf("store:\n  backend: redis\n  redis_sentinel: {master: mymaster, addrs: [%s], password: %s}\n  redis_min_replicas: 1\n  lease_ttl: 1500ms\n",
		strings.Join(addrs, ", "), haPassword))
	s.waitConfirmed(t, 50)
	events := watchSentinels(t, sentinels)
	held := leaseTokens(t, primary)

	killed := time.Now()
	primary.Kill(t)
	resumed := s.waitResumed(t, killed, haAfter)
	s.finish(t)
	// A fencing token never goes back: each lease held before the kill was
	// replicated (redis_min_replicas), so the promoted replica's token
	// counter is not behind it.
	promoted := promotedReplica(t, sentinels[0], replicas)
	for key, token := range held {
		counter := strings.Replace(key, ":lease:{", ":leasetoken:{", 1)
		now, err := promoted.Client(t).Get(context.Background(), counter).Uint64()
		if err != nil || now < token {
			t.Errorf("%s: token %d held before the kill, the promoted replica's counter %d (%v)", key, token, now, err)
		}
	}
	t.Logf("%d leases held before the kill; the promoted replica's token counters not behind any", len(held))
	before, after, refused := s.counts(killed)
	t.Logf("primary killed: confirmations resumed %v after the kill (bound %v), a replica promoted %v after it; %d updates confirmed before it, %d after, %d answers refused (%d updates, sent again), longest wait for a confirmation %v; every confirmed update delivered",
		resumed.Round(time.Millisecond), haResumeBound, events.first("+promoted-slave", killed).Round(time.Millisecond),
		before, after, refused, s.refusedUpdates(), s.longestWait().Round(time.Millisecond))
	if resumed > haResumeBound {
		t.Errorf("confirmations resumed %v after the primary's kill, more than %v; the Sentinels' events after the kill (s<index><event>@<time>):%s",
			resumed, haResumeBound, events.timeline(killed))
	}
	// go-redis's own lines (the failover client's switch to the new
	// primary) keep the connector's JSON log format.
	logged := s.r.child.stderr.String()
	for line := range strings.Lines(logged) {
		if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "{") {
			t.Errorf("a log line that is not JSON: %q", line)
		}
	}
	if !strings.Contains(logged, `"msg":"redis client"`) || !strings.Contains(logged, "new master") {
		t.Error(`the log does not say the redis client followed the new primary ("redis client" ... "new master")`)
	}
}

// leaseTokens returns the fencing token of every lease srv holds, by the
// lease's key; at least one.
func leaseTokens(t *testing.T, srv *redistest.Server) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	c := srv.Client(t)
	keys, err := c.Keys(ctx, "*:lease:{*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("the leases on %s: %q, %v; want at least one", srv.Addr(), keys, err)
	}
	out := make(map[string]uint64, len(keys))
	for _, key := range keys {
		v, err := c.Get(ctx, key).Result()
		token, _, ok := strings.Cut(v, ":")
		n, perr := strconv.ParseUint(token, 10, 64)
		if err != nil || !ok || perr != nil {
			t.Fatalf("lease %s = %q, %v", key, v, err)
		}
		out[key] = n
	}
	return out
}

// promotedReplica is the one of replicas the Sentinel names as the
// primary.
func promotedReplica(t *testing.T, sentinel *redistest.Server, replicas []*redistest.Server) *redistest.Server {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	addr, err := c.GetMasterAddrByName(ctx, "mymaster").Result()
	if err != nil || len(addr) != 2 {
		t.Fatalf("the primary by Sentinel %s: %q, %v", sentinel.Addr(), addr, err)
	}
	for _, r := range replicas {
		if r.Port() == addr[1] {
			return r
		}
	}
	t.Fatalf("Sentinel names %s:%s as the primary, none of the replicas", addr[0], addr[1])
	return nil
}

// sentinelEvents records the events the Sentinels publish (+sdown, +odown,
// +elected-leader, -failover-abort-not-elected, +promoted-slave,
// +switch-master, ...), each with which Sentinel and when: a failover that
// outlives its bound says where the time went. Only the leader publishes
// the steps of the failover it runs, so every Sentinel is watched.
type sentinelEvents struct {
	mu     sync.Mutex
	events []sentinelEvent
}

type sentinelEvent struct {
	at       time.Time
	sentinel int // index in the slice given to watchSentinels
	name     string
}

// watchSentinels subscribes to every event the sentinels publish and
// returns once the subscriptions are in place.
func watchSentinels(t *testing.T, sentinels []*redistest.Server) *sentinelEvents {
	t.Helper()
	e := &sentinelEvents{}
	for i, sentinel := range sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
		ctx, cancel := context.WithTimeout(context.Background(), crashWait)
		sub := c.PSubscribe(ctx, "*")
		_, err := sub.Receive(ctx) // the subscription's confirmation
		cancel()
		if err != nil {
			t.Fatalf("subscribing to Sentinel %s's events: %v", sentinel.Addr(), err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for m := range sub.Channel() {
				e.mu.Lock()
				e.events = append(e.events, sentinelEvent{at: time.Now(), sentinel: i, name: m.Channel})
				e.mu.Unlock()
			}
		}()
		t.Cleanup(func() { _ = sub.Close(); _ = c.Close(); <-done })
	}
	return e
}

// first returns how long after since the first event name came, from any
// Sentinel (-1 when none came).
func (e *sentinelEvents) first(name string, since time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events {
		if ev.name == name {
			return ev.at.Sub(since)
		}
	}
	return -1
}

// timeline lists the events with how long after since each came.
func (e *sentinelEvents) timeline(since time.Time) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, ev := range e.events {
		fmt.Fprintf(&b, " s%d%s@%v", ev.sentinel, ev.name, ev.at.Sub(since).Round(time.Millisecond))
	}
	return b.String()
}

// TestRedisOutage: the connector's one Redis (appendfsync always) is killed
// with SIGKILL, stays away for 30 s and comes back on its data. Meanwhile
// every update is refused, none is confirmed; afterwards every confirmed
// update reaches the gateway, from before the outage and after it, and the
// connector process is the same one.
func TestRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and a redis-server for 30 s")
	}
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AppendFsync: "always"})
	s := startHAStream(t, fmt.Sprintf("store: {backend: redis, redis_url: %q, lease_ttl: 1500ms}\n", srv.URL()))
	s.waitConfirmed(t, 50)

	killed := time.Now()
	srv.Kill(t)
	firstRefusal := s.waitRefused(t, killed)
	time.Sleep(time.Until(killed.Add(haDownFor))) // the outage itself: how long Redis stays away is the scenario
	back := time.Now()
	confirmedDown := s.confirmedBetween(killed, back)
	srv.Restart(t)
	resumed := s.waitResumed(t, back, haAfter)
	s.finish(t)
	before, after, refused := s.counts(killed)
	t.Logf("redis away %v: the first refusal %v after the kill; %d updates confirmed while it was away, %d answers refused (%d updates, each sent again until confirmed), confirmations resumed %v after it was back; %d updates confirmed before the outage, %d after; every confirmed update delivered",
		back.Sub(killed).Round(time.Millisecond), firstRefusal.Round(time.Millisecond), confirmedDown, refused, s.refusedUpdates(),
		resumed.Round(time.Millisecond), before, after)
	if confirmedDown != 0 {
		t.Errorf("%d updates confirmed while Redis was away", confirmedDown)
	}
}

// haStream is a connector process on Redis, a sender per chat posting
// Telegram webhook updates at a steady pace (each sent again until it is
// answered 200) and a gateway taking them in.
type haStream struct {
	r       *crashRig
	pid     int
	stop    chan struct{}
	senders sync.WaitGroup

	mu        sync.Mutex
	changed   chan struct{} // signalled on every change below
	confirmed []confirmation
	refused   []refusal
	got       map[int]bool
}

// refusal is one answer other than 200 (or no answer) to update i.
type refusal struct {
	i  int
	at time.Time
}

// confirmation is one update answered 200.
type confirmation struct {
	i int
	// first is when the update was first sent, sent when the answered
	// attempt was, at when the 200 came.
	first, sent, at time.Time
}

// startHAStream starts the connector with the store section storeDoc, a
// gateway, and the producer.
func startHAStream(t *testing.T, storeDoc string) *haStream {
	t.Helper()
	r := newCrashRig(t, connectorBinary(t), false)
	doc, err := os.ReadFile(r.config)
	if err != nil {
		t.Fatal(err)
	}
	r.config = filepath.Join(t.TempDir(), "ha.yaml")
	if err := os.WriteFile(r.config, []byte(strings.Replace(string(doc), "tenants:\n", storeDoc+"tenants:\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = append(r.env, "CONNECTOR_INSTANCE=ha")
	r.start(t)
	s := &haStream{r: r, pid: r.child.cmd.Process.Pid, stop: make(chan struct{}), changed: make(chan struct{}, 1), got: map[int]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gwDone := make(chan struct{})
	go func() {
		defer close(gwDone)
		s.readGateway(ctx)
	}()
	t.Cleanup(func() { cancel(); <-gwDone })
	for chat := range crashSessions {
		s.senders.Go(func() { s.send(chat) })
	}
	t.Cleanup(s.halt)
	return s
}

// send posts chat's updates (those numbered chat modulo crashSessions), one
// every haEvery, each again until it is answered 200, until stop.
func (s *haStream) send(chat int) {
	client := &http.Client{Timeout: 10 * time.Second}
	tick := time.NewTicker(haEvery)
	defer tick.Stop()
	for i := chat; ; i += crashSessions {
		first := time.Now()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			sent := time.Now()
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.r.child.addr+"/telegram/webhook", strings.NewReader(telegramUpdate(i)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", crashWebhookSecret)
			resp, err := client.Do(req)
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			s.mu.Lock()
			if ok {
				s.confirmed = append(s.confirmed, confirmation{i: i, first: first, sent: sent, at: time.Now()})
			} else {
				s.refused = append(s.refused, refusal{i: i, at: time.Now()})
			}
			s.mu.Unlock()
			s.signal()
			if ok {
				break
			}
		}
	}
}

// readGateway takes the tenant's inbound in, acknowledging each, and
// dials again whenever the connection ends, until ctx is done.
func (s *haStream) readGateway(ctx context.Context) {
	for ctx.Err() == nil {
		gw, err := relaytest.Dial(ctx, "ws://"+s.r.child.addr+"/relay", relaytest.Token("gw1", crashGatewaySecret, time.Now()))
		if err != nil {
			continue
		}
		if _, err := gw.Hello(ctx, "telegram", ""); err == nil {
			for {
				f, err := gw.Next(ctx, contract.TypeInbound)
				if err != nil {
					break
				}
				words := strings.Fields(f.Event.Text)
				if i, err := strconv.Atoi(words[len(words)-1]); err == nil {
					s.mu.Lock()
					s.got[i] = true
					s.mu.Unlock()
					s.signal()
				}
				_ = gw.Ack(ctx, f.BufferID)
			}
		}
		_ = gw.CloseNow()
	}
}

func (s *haStream) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds (checked under s.mu on every change),
// failing t after crashWait with what.
func (s *haStream) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	s.waitForState(t, func() string { return what }, cond)
}

// waitForState is waitFor with what said after the wait (under s.mu).
func (s *haStream) waitForState(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.After(crashWait + haDownFor)
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.changed:
		case <-s.r.child.exited:
			t.Fatalf("the connector exited while waiting for %s", what())
		case <-deadline:
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("timed out waiting for %s", what())
		}
	}
}

// waitConfirmed waits until n updates were confirmed.
func (s *haStream) waitConfirmed(t *testing.T, n int) {
	t.Helper()
	s.waitFor(t, fmt.Sprintf("%d confirmed updates", n), func() bool { return len(s.confirmed) >= n })
}

// waitRefused waits for a refusal after since and returns how long after
// since it came.
func (s *haStream) waitRefused(t *testing.T, since time.Time) time.Duration {
	t.Helper()
	var first time.Time
	s.waitFor(t, "a refused update", func() bool {
		for _, r := range s.refused {
			if r.at.After(since) {
				first = r.at
				return true
			}
		}
		return false
	})
	return first.Sub(since)
}

// refusedUpdates counts the updates refused at least once.
func (s *haStream) refusedUpdates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int]bool{}
	for _, r := range s.refused {
		seen[r.i] = true
	}
	return len(seen)
}

// waitResumed waits until n updates first sent after since were
// confirmed, and returns how long after since the first of them was.
func (s *haStream) waitResumed(t *testing.T, since time.Time, n int) time.Duration {
	t.Helper()
	var first time.Time
	s.waitFor(t, fmt.Sprintf("%d updates sent after %v confirmed", n, since.Format(time.TimeOnly)), func() bool {
		c := 0
		for _, cf := range s.confirmed {
			if cf.sent.After(since) {
				if c == 0 {
					first = cf.at
				}
				c++
			}
		}
		return c >= n
	})
	return first.Sub(since)
}

// confirmedBetween counts the updates sent after from and confirmed
// before to.
func (s *haStream) confirmedBetween(from, to time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, cf := range s.confirmed {
		if cf.sent.After(from) && cf.at.Before(to) {
			n++
		}
	}
	return n
}

// counts are the updates confirmed before and after at, and the refused
// answers.
func (s *haStream) counts(at time.Time) (before, after, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cf := range s.confirmed {
		if cf.at.Before(at) {
			before++
		} else {
			after++
		}
	}
	return before, after, len(s.refused)
}

// longestWait is the longest time an update waited from its first sending
// to its confirmation.
func (s *haStream) longestWait() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w time.Duration
	for _, cf := range s.confirmed {
		w = max(w, cf.at.Sub(cf.first))
	}
	return w
}

// halt stops the senders and waits for them.
func (s *haStream) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.senders.Wait()
}

// finish stops the producer, waits until the gateway got every confirmed
// update, and checks the connector is the process it started as.
func (s *haStream) finish(t *testing.T) {
	t.Helper()
	s.halt()
	var missing []int
	s.waitForState(t, func() string { return fmt.Sprintf("every confirmed update at the gateway; missing %v", missing) }, func() bool {
		missing = missing[:0]
		for _, cf := range s.confirmed {
			if !s.got[cf.i] {
				missing = append(missing, cf.i)
			}
		}
		return len(missing) == 0
	})
	select {
	case <-s.r.child.exited:
		t.Fatalf("the connector exited: %v", s.r.child.err)
	default:
	}
	if pid := s.r.child.cmd.Process.Pid; pid != s.pid {
		t.Fatalf("the connector is pid %d, started as %d", pid, s.pid)
	}
}
