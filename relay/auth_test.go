package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/relay"
)

// TestNewRefusesASendQueueBelowTwoFrames: a send queue bound below twice
// the largest frame would close a gateway 4408 on a large inbound, and
// again at each of its redeliveries, so New refuses it.
func TestNewRefusesASendQueueBelowTwoFrames(t *testing.T) {
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	_, err := relay.New(relay.Config{Tenants: tenants, SendQueueBytes: 256 << 10})
	if want := "SendQueueBytes 262144 is below 2097152"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("relay.New = %v, want an error containing %q", err, want)
	}
	srv, err := relay.New(relay.Config{Tenants: tenants, SendQueueBytes: 2 * contract.MaxFrameBytes})
	if err != nil {
		t.Fatalf("twice the largest frame: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestNewBoundsTokenSettings(t *testing.T) {
	secrets := make([]string, contract.MaxSecretsPerGateway+1)
	for i := range secrets {
		secrets[i] = fmt.Sprintf("rotated-secret-%d", i)
	}
	tenant := func(secrets ...string) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: secrets}}}}
	}
	for name, c := range map[string]struct {
		cfg  relay.Config
		want string
	}{
		"rotation list too long": {relay.Config{Tenants: tenant(secrets...)}, `gateway "gw1": 9 secrets, at most 8`},
		"empty secret":           {relay.Config{Tenants: tenant("s1", "")}, `gateway "gw1": secret 2 is empty`},
		"lifetime below the gateway's tokens": {relay.Config{Tenants: tenant("s1"), MaxTokenLifetime: time.Minute},
			"MaxTokenLifetime 1m0s is below the gateway's 5m0s token lifetime"},
	} {
		_, err := relay.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: relay.New = %v, want an error containing %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "rotated-secret") {
			t.Errorf("%s: the error quotes a secret: %v", name, err)
		}
	}
	srv, err := relay.New(relay.Config{Tenants: tenant(secrets[:contract.MaxSecretsPerGateway]...)})
	if err != nil {
		t.Fatalf("a full rotation list: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
