package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/clock"
	"connector/internal/redistest"
	"connector/store"
)

// pubsubClients returns, for each client of the server subscribed to
// channels, how many it is subscribed to (CLIENT LIST's sub field).
func pubsubClients(t *testing.T, admin *redis.Client) []int {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var subs []int
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		for f := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(f, "sub="); ok {
				if n, _ := strconv.Atoi(v); n > 0 {
					subs = append(subs, n)
				}
			}
		}
	}
	return subs
}

// connectedClients is INFO clients' connected_clients.
func connectedClients(t *testing.T, admin *redis.Client) int {
	t.Helper()
	info, err := admin.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no connected_clients in %q", info)
	return 0
}

// waitPubsubClients waits until the server's subscribed clients are want
// (their channel counts), failing after 10 s.
func waitPubsubClients(t *testing.T, admin *redis.Client, want []int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := pubsubClients(t, admin)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: subscribed clients %v, want %v", what, got, want)
		}
		time.Sleep(10 * time.Millisecond) // polling the server, not synchronising goroutines
	}
}

// TestRedisSubscriptionsShareOneConnection: however many channels a store
// subscribes, it holds one connection for them, each channel still gets
// its own messages only, the last subscriber of a channel unsubscribes it,
// and a killed connection is replaced with every channel subscribed again.
func TestRedisSubscriptionsShareOneConnection(t *testing.T) {
	const n = 50
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	s := opener(t, redisConfig(srv))(clock.System)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps := s.PubSub()
	before := connectedClients(t, admin)

	subs := make([]<-chan []byte, n)
	stops := make([]func(), n)
	for i := range n {
		ch, stop, err := ps.Subscribe(ctx, fmt.Sprintf("room%d", i))
		if err != nil {
			t.Fatalf("Subscribe(room%d): %v", i, err)
		}
		subs[i], stops[i] = ch, stop
	}
	// A second subscriber of one channel shares its subscription.
	twin, stopTwin, err := ps.Subscribe(ctx, "room0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopTwin()
	after := connectedClients(t, admin)
	t.Logf("connected_clients %d before %d subscriptions, %d after", before, n+1, after)
	if after > before+2 {
		t.Fatalf("connected_clients went from %d to %d for %d subscriptions, want at most 2 more", before, after, n+1)
	}
	if got := pubsubClients(t, admin); len(got) != 1 || got[0] != n {
		t.Fatalf("after %d subscriptions the server has subscribed clients %v, want one with %d channels", n+1, got, n)
	}

	publishEach := func(round string) {
		t.Helper()
		for i := range n {
			if err := ps.Publish(ctx, fmt.Sprintf("room%d", i), fmt.Appendf(nil, "%s %d", round, i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			select {
			case m := <-subs[i]:
				if want := fmt.Sprintf("%s %d", round, i); string(m) != want {
					t.Fatalf("room%d got %q, want %q (its own message, first)", i, m, want)
				}
			case <-ctx.Done():
				t.Fatalf("timed out waiting for room%d's %s message", i, round)
			}
		}
		select {
		case m := <-twin:
			if want := round + " 0"; string(m) != want {
				t.Fatalf("room0's second subscriber got %q, want %q", m, want)
			}
		case <-ctx.Done():
			t.Fatalf("timed out waiting for room0's second subscriber's %s message", round)
		}
	}
	publishEach("first")

	if _, err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil {
		t.Fatal(err)
	}
	waitPubsubClients(t, admin, []int{n}, "the killed connection replaced, every channel subscribed again")
	publishEach("after the reconnection")

	// The last subscriber of a channel unsubscribes it; room0 keeps its twin.
	for i := range n / 2 {
		stops[i]()
	}
	waitPubsubClients(t, admin, []int{n - n/2 + 1}, "the channels left unsubscribed")
	if err := ps.Publish(ctx, "room0", []byte("twin only")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-twin:
		if string(m) != "twin only" {
			t.Fatalf("room0's remaining subscriber got %q", m)
		}
	case <-ctx.Done():
		t.Fatal("timed out waiting for room0's remaining subscriber's message")
	}
}

// TestRedisResubscribeAfterCancel: a channel subscribed again right after
// its last subscriber left gets the messages published after Subscribe
// returns, though its UNSUBSCRIBE and SUBSCRIBE cross on the connection.
func TestRedisResubscribeAfterCancel(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := opener(t, redisConfig(srv))(clock.System)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps := s.PubSub()
	for i := range 50 {
		ch, stop, err := ps.Subscribe(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		if err := ps.Publish(ctx, "c", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-ch:
			if string(m) != strconv.Itoa(i) {
				t.Fatalf("round %d got %q", i, m)
			}
		case <-ctx.Done():
			t.Fatalf("round %d: timed out waiting for the message published after Subscribe returned", i)
		}
		stop()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ps.Subscribe(ctx, "c"); err != store.ErrClosed {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
}

// TestRedisClusterSubscriptionsShareOneConnection: on a Redis Cluster of
// three shards too, channels of every shard's slots share one connection,
// to one node, and each gets the messages published on it through any
// primary (the cluster bus carries PUBLISH to every node).
func TestRedisClusterSubscriptionsShareOneConnection(t *testing.T) {
	const n = 30
	c := redistest.StartCluster(t, 3, 0, redistest.Options{})
	s := opener(t, store.Config{
		Backend:      store.BackendRedis,
		RedisCluster: &store.RedisCluster{Addrs: c.Addrs()[:1]},
		RedisPrefix:  fmt.Sprintf("test%d:", prefixes.Add(1)),
	})(clock.System)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps := s.PubSub()
	subs := make([]<-chan []byte, n)
	for i := range n {
		ch, stop, err := ps.Subscribe(ctx, fmt.Sprintf("room%d", i))
		if err != nil {
			t.Fatalf("Subscribe(room%d): %v", i, err)
		}
		defer stop()
		subs[i] = ch
	}
	var clients []int
	for _, node := range c.Nodes() {
		clients = append(clients, pubsubClients(t, node.Client(t))...)
	}
	if len(clients) != 1 || clients[0] != n {
		t.Fatalf("the cluster's nodes have subscribed clients %v, want one with %d channels", clients, n)
	}
	for i := range n {
		if err := ps.Publish(ctx, fmt.Sprintf("room%d", i), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case m := <-subs[i]:
			if string(m) != strconv.Itoa(i) {
				t.Fatalf("room%d got %q, want its own message", i, m)
			}
		case <-ctx.Done():
			t.Fatalf("timed out waiting for room%d's message", i)
		}
	}
}
