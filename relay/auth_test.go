package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/relay"
)

func TestNewBoundsTokenSettings(t *testing.T) {
	tenant := func(secrets ...string) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: secrets}}}}
	}
	for name, c := range map[string]struct {
		cfg  relay.Config
		want string
	}{
		"lifetime below the gateway's tokens": {relay.Config{Tenants: tenant("s1"), MaxTokenLifetime: time.Minute},
			"MaxTokenLifetime 1m0s is below the gateway's 5m0s token lifetime"},
	} {
		_, err := relay.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: relay.New = %v, want an error containing %q", name, err, c.want)
		}
	}
	srv, err := relay.New(relay.Config{Tenants: tenant("s1"), MaxTokenLifetime: contract.TokenTTL})
	if err != nil {
		t.Fatalf("a lifetime of the gateway's own: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
