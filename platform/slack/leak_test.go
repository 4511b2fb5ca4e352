package slack

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"connector/platform"
	"connector/platform/slack/slacktest"
	"connector/vault"
)

// leakVault is the leak test's vault, made before it counts (a memory
// vault runs no goroutine).
var leakVault = vault.NewMemory(vault.Config{})

// TestRunLeavesNoGoroutines runs the platform through signed ingest, a
// draft stream, typing, a send and Socket Mode, stops it, and checks that
// every goroutine it started is gone.
func TestRunLeavesNoGoroutines(t *testing.T) {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	before := runtime.NumGoroutine()
	t.Run("run", func(t *testing.T) {
		e := newEnv(t, nil, &platform.Deps{Vault: leakVault})
		e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "hi"), http.StatusOK)
		e.sink.Next(t)
		for _, action := range []string{
			`{"op":"typing","chat_id":"` + dmAda + `","metadata":{"thread_id":"1768490100.000100"}}`,
			`{"op":"draft","chat_id":"` + dmAda + `","content":"thinking","draft_id":7,"metadata":{"thread_id":"1768490100.000100"}}`,
			`{"op":"draft","chat_id":"` + dmAda + `","content":"thinking done","draft_id":7,"final":true,"metadata":{"thread_id":"1768490100.000100"}}`,
			`{"op":"send","chat_id":"` + dmAda + `","content":"hello","metadata":{}}`,
		} {
			if r := e.execute(t, "t1", action); !r.Success {
				t.Fatalf("%s: %+v", action, r)
			}
		}
		socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
		s := newEnvOn(t, e.fake, socket, &platform.Deps{Vault: leakVault})
		ctx, cancel := contextFor()
		defer cancel()
		if err := e.fake.WaitSocket(ctx, 1); err != nil {
			t.Fatal(err)
		}
		id, err := e.fake.PushEvent(ctx, "events_api", slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev2",
			slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "", "over the socket")))
		if err != nil {
			t.Fatal(err)
		}
		s.sink.Next(t)
		if _, err := e.fake.WaitAck(ctx, id); err != nil {
			t.Fatal(err)
		}
	})
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	deadline := time.Now().Add(waitFor)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left (had %d):\n%s", runtime.NumGoroutine(), before, leaked(string(buf[:runtime.Stack(buf, true)])))
		}
		time.Sleep(5 * time.Millisecond) // polling for exits: goroutines signal nothing
	}
}

func leaked(stacks string) string {
	var out []string
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "connector/") || strings.Contains(g, "slack-go") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
