package nexscope

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/platform/platformtest"
)

// recordingMetrics keeps every label it is given.
type recordingMetrics struct {
	mu     sync.Mutex
	labels []string
}

func (m *recordingMetrics) RateLimitWait(p string, _ time.Duration) { m.add(p) }
func (m *recordingMetrics) RateLimited(p string)                    { m.add(p) }
func (m *recordingMetrics) Dropped(p, reason string)                { m.add(p + " " + reason) }

func (m *recordingMetrics) add(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.labels = append(m.labels, s)
}

func (m *recordingMetrics) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.labels, "\n")
}

// A full run at debug level: refused and accepted handshakes, messages,
// errors, a file, the bridge both ways, a heartbeat kill and shutdown. The
// configured token must appear in no log line, metric label or frame.
func TestTokenNeverLeaks(t *testing.T) {
	const token = "TOKEN-7f3a9c-do-not-leak"
	tr := newRelay(t, Config{Token: token, Rooms: []Room{{Name: "lab", Tenant: "t1"}}})
	metrics := &recordingMetrics{}
	tr.p.deps.Metrics = metrics
	tr.sink = platformtest.NewSink(64)
	stop := tr.run(t, tr.sink)

	var frames strings.Builder
	collect := func(c *client, n int) {
		for range n {
			_, b := c.Read()
			frames.Write(b)
		}
	}
	// Refusals, including near misses of the token.
	for _, q := range []string{"name=a&token=" + token[:10], "name=a&token=" + token + "x", "name=a%20b&token=" + token,
		"name=a&token=" + token + "&v=9"} {
		c := tr.dialURL(t, "/ws/lab", q, nil)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		for {
			_, b, err := c.WS.Read(ctx)
			if err != nil {
				var ce websocket.CloseError
				if errors.As(err, &ce) {
					frames.WriteString(ce.Reason)
				}
				break
			}
			frames.Write(b)
		}
		cancel()
	}
	alice := tr.dialURL(t, "/ws/lab", "name=alice&token="+token+"&v=1", nil)
	alice.Name = "alice"
	collect(alice, 1) // joined
	bob := tr.dialURL(t, "/ws/lab", "name=bob&token="+token, nil)
	bob.Name = "bob"
	collect(alice, 1)
	collect(bob, 1)
	alice.SendJSON(msg("m1", "alice", []string{"bob", "hermes"}, "hi"))
	collect(bob, 1)
	collect(alice, 1)
	tr.sink.Next(t)
	over := msg("m2", "alice", []string{"hermes"}, "loop")
	over["hopCount"] = DefaultHopLimit
	alice.SendJSON(over) // dropped by the hop limit: a metric
	collect(alice, 1)
	alice.SendText(`{"type":"msg","from":"bob"}`)
	alice.SendText(`{oops`)
	collect(alice, 2)
	sendFile(alice, "f1", []string{"bob"}, 10, 4)
	collect(bob, 5)
	collect(alice, 1)
	r := tr.p.Execute(context.Background(), "t1", &contract.Action{Op: "send", ChatID: "lab", Content: "reply", ReplyTo: "m1"})
	if !r.Success {
		t.Fatalf("send %+v", r)
	}
	collect(alice, 1)
	_ = bob.WS.CloseNow()
	// alice keeps reading through shutdown, as a live client does.
	go func() {
		for {
			if _, _, err := alice.WS.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	stop()

	for what, text := range map[string]string{"logs": tr.logs.String(), "metrics": metrics.String(), "frames": frames.String()} {
		if text == "" {
			t.Fatalf("no %s captured", what)
		}
		if strings.Contains(text, token) || strings.Contains(text, token[:10]) {
			t.Fatalf("the token appears in %s:\n%s", what, text)
		}
	}
	if !strings.Contains(metrics.String(), "nexscope hop_limit") {
		t.Fatalf("hop-limit drop not counted: %s", metrics)
	}
}
