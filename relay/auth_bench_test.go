package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
)

// BenchmarkAuthenticate verifies upgrade tokens of an unknown gateway, of a
// gateway with one secret and of one with a full rotation list: wrong and
// right secrets alike should cost the same.
func BenchmarkAuthenticate(b *testing.B) {
	now := time.Unix(1767225300, 0)
	secrets := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("secret-%d-of-a-gateway-rotation-list", i)
		}
		return out
	}
	sizes := []int{1, contract.MaxSecretsPerGateway}
	var gateways []Gateway
	for _, n := range sizes {
		gateways = append(gateways, Gateway{ID: fmt.Sprintf("gw%d", n), Secrets: secrets(n)})
	}
	s, err := New(Config{Clock: clocktest.New(now), Tenants: []Tenant{{ID: "t1", Gateways: gateways}}})
	if err != nil {
		b.Skip(err)
	}
	defer s.Shutdown(context.Background())
	exp := now.Unix() + 300
	cases := []struct{ name, token string }{{"unknown id", contract.MintToken("gw-unknown", "x", exp)}}
	for _, n := range sizes {
		id := fmt.Sprintf("gw%d", n)
		cases = append(cases,
			struct{ name, token string }{fmt.Sprintf("wrong secret/%d secrets", n), contract.MintToken(id, "wrong", exp)},
			struct{ name, token string }{fmt.Sprintf("last secret/%d secrets", n), contract.MintToken(id, secrets(n)[n-1], exp)})
	}
	for _, c := range cases {
		header := "Bearer " + c.token
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_, _, _, _ = s.authenticate(header)
			}
		})
	}
}
