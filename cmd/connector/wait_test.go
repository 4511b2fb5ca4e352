package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveWait bounds every wait of the tests that run serve, or a command,
// in this process: for it to listen, return, or do what the test asked.
const serveWait = 20 * time.Second

// listening waits for serve, started with onListen sending to addrCh and
// its result going to done, to report its address.
func listening(t *testing.T, addrCh <-chan string, done <-chan error) string {
	t.Helper()
	select {
	case addr := <-addrCh:
		return addr
	case err := <-done:
		t.Fatalf("serve returned %v before listening", err)
	case <-time.After(serveWait):
		t.Fatalf("timed out after %v waiting for serve to listen", serveWait)
	}
	return ""
}

// served waits for serve, whose context was cancelled, to return, and marks
// t failed unless it returned nil. It does not stop the test, so it also
// serves in a Cleanup.
func served(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(serveWait):
		t.Errorf("timed out after %v waiting for serve to return after cancel", serveWait)
	}
}

// waitMetrics polls the /metrics page at url until it holds every line of
// want, for at most serveWait.
func waitMetrics(t *testing.T, url string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(serveWait)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		missing := ""
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s in the metrics:\n%s", serveWait, missing, body)
		}
		time.Sleep(20 * time.Millisecond) // polling interval of the metrics page
	}
}
