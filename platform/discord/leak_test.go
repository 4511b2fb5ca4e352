package discord

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"connector/platform"
	"connector/platform/discord/discordtest"
)

// TestRunLeavesNoGoroutines runs the platform through ingest, interactions
// and egress, stops it, and checks that every goroutine it started is gone.
func TestRunLeavesNoGoroutines(t *testing.T) {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	before := runtime.NumGoroutine()
	func() {
		// The tests' common vault (a memory vault runs no goroutine).
		e := newEnvDeps(t, platform.Deps{Vault: sharedVault}, discordtest.Options{}, nil)
		e.startReady(t)
		e.dispatch(t, "MESSAGE_CREATE", msg("7900", threadPlan, guildLab, "hi", true))
		e.sink.Next(t)
		if r := execute(t, e, "t1", `{"op":"typing","chat_id":"103","metadata":{}}`); !r.Success {
			t.Fatalf("typing = %+v", r)
		}
		e.cancel()
		select {
		case err := <-e.done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("timed out after 10s waiting for Run to return after cancel")
		}
		e.done <- nil
		e.fake.Close()
	}()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			t.Fatalf("%d goroutines left (had %d):\n%s", runtime.NumGoroutine(), before, leaked(stacks))
		}
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond) // polling for exits: goroutines signal nothing
	}
}

func leaked(stacks string) string {
	var out []string
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "connector/platform/discord") || strings.Contains(g, "discordgo") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
