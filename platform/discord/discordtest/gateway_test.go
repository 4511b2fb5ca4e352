package discordtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/platform/discord/discordtest"
)

// identifyOnce dials the fake Gateway, identifies with token and intents, and
// returns the close status the connection then ends with.
func identifyOnce(t *testing.T, f *discordtest.Server, token string, intents int) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, f.GatewayURL, nil)
	if err != nil {
		t.Fatalf("dial the fake Gateway: %v", err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err != nil {
		t.Fatalf("read HELLO: %v", err)
	}
	identify, _ := json.Marshal(map[string]any{"op": 2, "d": map[string]any{"token": "Bot " + token, "intents": intents}})
	if err := c.Write(ctx, websocket.MessageText, identify); err != nil {
		t.Fatalf("write IDENTIFY: %v", err)
	}
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			t.Fatal("timed out after 10s waiting for the fake to close the Gateway after a refused IDENTIFY")
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			return websocket.StatusAbnormalClosure // the socket dropped without a close frame
		}
		return ce.Code
	}
}

// TestRefusedIdentifyAlwaysCarriesItsCloseCode repeats the refusal: the
// close code is what tells a client not to retry, so it must reach the client
// every time, never a bare socket drop (1006).
func TestRefusedIdentifyAlwaysCarriesItsCloseCode(t *testing.T) {
	f := discordtest.New(t, discordtest.Options{Token: "right", DisallowedIntents: 1 << 15})
	for i := range 100 {
		if code := identifyOnce(t, f, "wrong", 0); code != 4004 {
			t.Fatalf("attempt %d: bad token closed with %d, want 4004", i, code)
		}
		if code := identifyOnce(t, f, "right", 1<<15); code != 4014 {
			t.Fatalf("attempt %d: disallowed intent closed with %d, want 4014", i, code)
		}
	}
}

// gwRead reads c's next Gateway frame.
func gwRead(ctx context.Context, t *testing.T, c *websocket.Conn) (op int, seq int64, typ string, d json.RawMessage) {
	t.Helper()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read a Gateway frame: %v", err)
	}
	var f struct {
		Op int             `json:"op"`
		S  int64           `json:"s"`
		T  string          `json:"t"`
		D  json.RawMessage `json:"d"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Op, f.S, f.T, f.D
}

// gwWrite writes op with d on c.
func gwWrite(ctx context.Context, t *testing.T, c *websocket.Conn, op int, d any) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"op": op, "d": d})
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

// TestResumeReplaysMissedDispatches: as Discord does, a RESUME is first
// sent the dispatches past its sequence number that the lost connection
// never delivered, in order, then RESUMED. Without them a client whose
// connection dropped right after READY waited for its GUILD_CREATEs for
// good.
func TestResumeReplaysMissedDispatches(t *testing.T) {
	f := discordtest.New(t, discordtest.Options{Token: "right"})
	discordtest.World(f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, f.GatewayURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	gwRead(ctx, t, c) // HELLO
	gwWrite(ctx, t, c, 2, map[string]any{"token": "Bot right", "intents": 0})
	_, last, typ, d := gwRead(ctx, t, c)
	var ready struct {
		SessionID string            `json:"session_id"`
		Guilds    []json.RawMessage `json:"guilds"`
	}
	if err := json.Unmarshal(d, &ready); typ != "READY" || err != nil || len(ready.Guilds) == 0 {
		t.Fatalf("first dispatch %s %s, want READY listing guilds", typ, d)
	}
	for range ready.Guilds {
		if _, last, typ, _ = gwRead(ctx, t, c); typ != "GUILD_CREATE" {
			t.Fatalf("dispatch %s after READY, want GUILD_CREATE", typ)
		}
	}
	// Two dispatches sent, never read: the connection is lost.
	for _, id := range []string{"m1", "m2"} {
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", map[string]any{"id": id}); err != nil {
			t.Fatal(err)
		}
	}
	c.CloseNow()

	r, _, err := websocket.Dial(ctx, f.GatewayURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.CloseNow()
	gwRead(ctx, t, r) // HELLO
	gwWrite(ctx, t, r, 6, map[string]any{"token": "Bot right", "session_id": ready.SessionID, "seq": last})
	var got []string
	for {
		op, seq, typ, d := gwRead(ctx, t, r)
		if op != 0 {
			t.Fatalf("op %d after RESUME, want dispatches", op)
		}
		if seq != last+1 {
			t.Fatalf("%s with sequence %d after %d", typ, seq, last)
		}
		last = seq
		if typ == "RESUMED" {
			break
		}
		var m struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(d, &m)
		got = append(got, typ+" "+m.ID)
	}
	if want := []string{"MESSAGE_CREATE m1", "MESSAGE_CREATE m2"}; !slices.Equal(got, want) {
		t.Fatalf("replayed %q before RESUMED, want %q", got, want)
	}
}
