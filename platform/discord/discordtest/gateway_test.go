package discordtest_test

import (
	"context"
	"encoding/json"
	"errors"
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
