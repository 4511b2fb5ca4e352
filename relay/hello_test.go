package relay

import (
	"context"
	"testing"

	"connector/contract"
	"connector/descriptor"
	"connector/platform"
)

// namedPlatform is a platform that only has a name and a descriptor.
type namedPlatform string

func (p namedPlatform) Name() string { return string(p) }
func (p namedPlatform) Descriptor() descriptor.Descriptor {
	d := descriptor.Discord([]string{contract.OpSend})
	d.Platform, d.Label = string(p), string(p)
	return d
}
func (namedPlatform) Run(ctx context.Context, _ platform.Sink) error { <-ctx.Done(); return nil }
func (namedPlatform) ChatTenant(context.Context, string) (string, error) {
	return "", platform.ErrUnknownChat
}
func (namedPlatform) Execute(context.Context, string, *contract.Action) contract.Result {
	return contract.Failed(contract.CodeUnavailable, "not here")
}
func (namedPlatform) Status() platform.Status { return platform.Status{Ready: true} }

// TestRepeatedHellosGrowNothing: a gateway may repeat hello without end.
// Every hello is answered with its descriptor again, and the connection's
// list of hello'd platforms stays a set: at most one entry per platform
// plus "relay", in first-hello order.
func TestRepeatedHellosGrowNothing(t *testing.T) {
	s, err := New(Config{
		Tenants:        []Tenant{{ID: "t1", Gateways: []Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms:      []platform.Platform{namedPlatform("alpha"), namedPlatform("beta")},
		SendQueueBytes: 1 << 30, // keep every answer queued, to count them
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	c := newConn(s, s.gateways["gw1"], nil, nil, "test")
	names := []string{"beta", "relay", "alpha"}
	const hellos = 3000
	for i := range hellos {
		c.handleLine([]byte(`{"type": "hello", "platform": "` + names[i%len(names)] + `", "botId": ""}`))
	}
	if len(c.identities) != len(names) || c.identities[0] != "beta" || c.identities[1] != "relay" || c.identities[2] != "alpha" {
		t.Fatalf("after %d hellos the connection lists %d platforms (first ones %q), want %q",
			hellos, len(c.identities), c.identities[:min(len(c.identities), 6)], names)
	}
	if c.q.Len() != hellos {
		t.Fatalf("%d hellos answered with %d frames, want one descriptor each", hellos, c.q.Len())
	}
}

// TestRepeatedHellosGrowNoSeat: the tenant's record of what a connection
// serves (its seat, which a new driver attaches again and a remote role
// announces to the driver) stays a set too, whatever the hellos repeated.
func TestRepeatedHellosGrowNoSeat(t *testing.T) {
	s, err := New(Config{
		Tenants:   []Tenant{{ID: "t1", Gateways: []Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms: []platform.Platform{namedPlatform("alpha"), namedPlatform("beta")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	c := newConn(s, s.gateways["gw1"], nil, nil, "test")
	names := []string{"beta", "relay", "alpha"}
	const hellos = 3000
	for i := range hellos {
		c.handleLine([]byte(`{"type": "hello", "platform": "` + names[i%len(names)] + `", "botId": ""}`))
	}
	h := s.hub("t1")
	h.mu.Lock()
	got := len(h.seats[c].platforms)
	h.mu.Unlock()
	if got != len(names) {
		t.Fatalf("after %d hellos the connection's seat lists %d platforms, want %d", hellos, got, len(names))
	}
}
