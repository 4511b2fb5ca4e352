package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/relay/relaytest"
)

// claimRaceConfig is two tenants fronted on Telegram, on a Redis store.
const claimRaceConfig = `listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
log: {level: info, format: json}
store: {backend: redis, redis_url: %q, lease_ttl: 2s}
tenants:
  - {id: a, gateways: [{id: gw-a, secrets: [sa]}]}
  - {id: b, gateways: [{id: gw-b, secrets: [sb]}]}
telegram:
  api_server_url: %s
  webhook_url: https://connector.example/telegram/webhook
`

// TestClaimRaceAcrossInstances is issue 22's claim race: two instances
// share one redis-server; in every round tenant a claims a Telegram group
// through instance 0 while tenant b claims the same group through
// instance 1, both requests released at once. Exactly one of them may be
// answered 200, the other 409, and the stored claim is the winner's (the
// loser cannot release it).
func TestClaimRaceAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	rigs := adminRigsOnRedis(t, 2, func(r *adminRig, redisURL string) string {
		return fmt.Sprintf(claimRaceConfig, redisURL, r.tfake.URL)
	})
	claim := func(r *adminRig, tenant, path, chat string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+path, strings.NewReader(`{"platform":"telegram","channelId":"`+chat+`"}`))
		req.Header.Set("Authorization", "Bearer "+relaytest.Token("gw-"+tenant, "s"+tenant, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("tenant %s %s %s: %v", tenant, path, chat, err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const rounds = 30
	both := 0
	for i := range rounds {
		chat := fmt.Sprint(-3000 - i)
		var start sync.WaitGroup
		var done sync.WaitGroup
		start.Add(1)
		status := map[string]int{}
		var mu sync.Mutex
		for k, tenant := range []string{"a", "b"} {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				s := claim(rigs[k], tenant, "/manage/scope", chat)
				mu.Lock()
				status[tenant] = s
				mu.Unlock()
			}()
		}
		start.Done()
		done.Wait()
		var winner, loser string
		switch {
		case status["a"] == http.StatusOK && status["b"] == http.StatusConflict:
			winner, loser = "a", "b"
		case status["b"] == http.StatusOK && status["a"] == http.StatusConflict:
			winner, loser = "b", "a"
		case status["a"] == http.StatusOK && status["b"] == http.StatusOK:
			both++
			continue
		default:
			t.Fatalf("round %d: statuses %v, want one 200 and one 409", i, status)
		}
		// The loser holds nothing, on either instance; the winner holds it.
		for k := range rigs {
			if s := claim(rigs[k], loser, "/manage/scope", chat); s != http.StatusConflict {
				t.Fatalf("round %d: %s's second claim through instance %d: %d, want 409", i, loser, k, s)
			}
		}
		if s := claim(rigs[1], loser, "/manage/scope/release", chat); s != http.StatusNotFound {
			t.Fatalf("round %d: %s's release: %d, want 404", i, loser, s)
		}
		if s := claim(rigs[0], winner, "/manage/scope", chat); s != http.StatusOK {
			t.Fatalf("round %d: %s's repeated claim: %d, want 200", i, winner, s)
		}
	}
	if both > 0 {
		t.Fatalf("both tenants were answered 200 for the same group in %d of %d rounds", both, rounds)
	}
}
