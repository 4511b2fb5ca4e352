package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterSlots is how many hash slots a Redis Cluster has.
const clusterSlots = 16384

// Cluster is a running Redis Cluster.
type Cluster struct {
	// Primaries serve the slots, in equal ranges in order; Replicas[i] are
	// the replicas of Primaries[i].
	Primaries []*Server
	Replicas  [][]*Server
}

// StartCluster runs a Redis Cluster of shards primaries, each with
// replicas replicas, all with opt (Cluster set), joins them the way
// `redis-cli --cluster create` does (slots split evenly, CLUSTER MEET,
// CLUSTER REPLICATE) and waits until every node sees the cluster whole.
func StartCluster(t testing.TB, shards, replicas int, opt Options) *Cluster {
	t.Helper()
	opt.Cluster = true
	c := &Cluster{Primaries: make([]*Server, shards), Replicas: make([][]*Server, shards)}
	for i := range c.Primaries {
		c.Primaries[i] = Start(t, opt)
		for range replicas {
			c.Replicas[i] = append(c.Replicas[i], Start(t, opt))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	first := c.Primaries[0].Client(t)
	for i, p := range c.Primaries {
		from, to := i*clusterSlots/shards, (i+1)*clusterSlots/shards-1
		if err := p.Client(t).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", from, to).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %v", from, to, p.Addr(), err)
		}
	}
	for _, n := range c.Nodes()[1:] {
		if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port(), n.busPort).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", n.Addr(), err)
		}
	}
	for i, rs := range c.Replicas {
		id := c.Primaries[i].nodeID(t)
		for _, r := range rs {
			replicate(t, r, id)
		}
	}
	c.waitWhole(t)
	return c
}

// Nodes are every primary and replica.
func (c *Cluster) Nodes() []*Server {
	out := append([]*Server(nil), c.Primaries...)
	for _, rs := range c.Replicas {
		out = append(out, rs...)
	}
	return out
}

// Addrs are the primaries' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Primaries))
	for i, p := range c.Primaries {
		out[i] = p.Addr()
	}
	return out
}

// nodeID is the cluster node id of s.
func (s *Server) nodeID(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	id, err := s.Client(t).Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr(), err)
	}
	return id
}

// replicate makes r a replica of the node id, once r has learnt of it
// through the cluster bus.
func replicate(t testing.TB, r *Server, id string) {
	t.Helper()
	c := r.Client(t)
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: CLUSTER REPLICATE %s on %s: %v", id, r.Addr(), err)
		}
		time.Sleep(50 * time.Millisecond) // until the gossip has introduced the primary
	}
}

// waitWhole waits until every node reports the cluster ok, knows every
// node and sees every slot served, and every primary has its replicas
// online.
func (c *Cluster) waitWhole(t testing.TB) {
	t.Helper()
	nodes := c.Nodes()
	want := map[string]string{
		"cluster_state": "ok", "cluster_slots_ok": strconv.Itoa(clusterSlots),
		"cluster_known_nodes": strconv.Itoa(len(nodes)),
	}
	deadline := time.Now().Add(2 * startTimeout)
	for _, n := range nodes {
		cl := n.Client(t)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := cl.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && infoHas(info, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: timed out waiting for the cluster to form at %s (want %v):\n%s%v", n.Addr(), want, info, err)
			}
			time.Sleep(50 * time.Millisecond) // polling the nodes' gossip
		}
	}
	for i, p := range c.Primaries {
		p.WaitReplicas(t, len(c.Replicas[i]))
	}
}

// infoHas reports whether the INFO-style text has every field of want.
func infoHas(info string, want map[string]string) bool {
	got := 0
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && want[k] == v {
			got++
		}
	}
	return got == len(want)
}
