package discord

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
)

// FuzzNormalizeFixture feeds arbitrary dispatches and contexts through the
// normalization that live ingest and `connector conformance events` share:
// it must never panic, and whatever it accepts must be a well-formed source.
func FuzzNormalizeFixture(f *testing.F) {
	for _, c := range loadFixtures(f) {
		f.Add([]byte(c.Raw), []byte(c.Context))
	}
	f.Add([]byte(`{"t":"MESSAGE_CREATE","d":{"id":"1","channel_id":"2","author":null}}`), []byte(`{}`))
	f.Add([]byte(`{"t":"INTERACTION_CREATE","d":{"id":"1","type":2,"channel_id":"2","data":{"options":[{"type":1,"options":[{"type":2,"options":[{"type":1}]}]}]}}}`), []byte(`null`))
	f.Fuzz(func(t *testing.T, raw, ctx []byte) {
		o, err := NormalizeFixture(raw, ctx)
		if err != nil {
			return
		}
		src := o.Source
		if src.Platform != "discord" || src.ChatID == "" || src.ChatType == "" {
			t.Fatalf("accepted a malformed source: %+v", src)
		}
		if _, err := json.Marshal(src); err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzPlatform is a running platform whose REST calls go nowhere, for
// fuzzing the webhook.
func fuzzPlatform(t testing.TB) (*Platform, ed25519.PrivateKey) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	cfg := Config{BotToken: testToken, PublicKey: hexKey(pub), ApplicationID: "9000",
		Guilds: map[string]string{guildLab: "t1"}, DMTenant: "t1", APIBaseURL: "http://127.0.0.1:1", RequestTimeout: 50 * time.Millisecond}
	p, err := New(cfg, platform.Deps{Vault: sharedVault})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); p.work.Wait() })
	p.life = &lifecycle{ctx: ctx, sink: platformtest.NewSink(0)}
	return p, priv
}

// FuzzInteractionWebhook signs arbitrary bodies and serves them: the handler
// answers one of its documented statuses and never panics.
func FuzzInteractionWebhook(f *testing.F) {
	p, priv := fuzzPlatform(f)
	f.Add(slashBody("1", "tok", guildLab, chanGeneral), true)
	f.Add([]byte(`{"id":"2","type":1}`), true)
	f.Add([]byte(`{"id":"3","type":3,"guild_id":"100","channel_id":"101","data":{"custom_id":"hp1:a:b"},"member":{"user":{"id":"1"}}}`), true)
	f.Add([]byte(`{"id":"4","type":5,"channel_id":"5","user":{"id":"1"},"data":{"components":[{"components":[{"custom_id":"a","value":"b"}]}]}}`), true)
	f.Add([]byte(`{"id":"5","type":2`), false)
	f.Fuzz(func(t *testing.T, body []byte, sign bool) {
		r := discordtest.InteractionRequest("http://x/discord/interactions", priv, time.Now(), body)
		if !sign {
			r.Header.Set("X-Signature-Ed25519", "00")
		}
		w := httptest.NewRecorder()
		p.serveInteractions(w, r)
		switch w.Code {
		case 200, 400, 401, 409, 413, 503:
		default:
			t.Fatalf("status %d", w.Code)
		}
		if !sign && w.Code != 401 {
			t.Fatalf("unsigned body got %d", w.Code)
		}
	})
}

// FuzzRead429 parses arbitrary 429 answers: the retry delay is always
// positive and bounded.
func FuzzRead429(f *testing.F) {
	f.Add([]byte(`{"message":"You are being rate limited.","retry_after":0.5,"global":true}`), "1", "0.3")
	f.Add([]byte(`not json`), "", "")
	f.Add([]byte(`{"retry_after":-1}`), "NaN", "1e400")
	f.Fuzz(func(t *testing.T, body []byte, retryAfter, resetAfter string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("X-RateLimit-Reset-After", resetAfter)
		h.Set("X-RateLimit-Remaining", "0")
		resp := &http.Response{StatusCode: 429, Header: h, Body: io.NopCloser(bytes.NewReader(body))}
		lim := read429(resp, readRateHeaders(h))
		if lim.retryAfter <= 0 || lim.retryAfter > 1e6*time.Second {
			t.Fatalf("retry after %v", lim.retryAfter)
		}
	})
}

// FuzzParseManifest validates arbitrary command manifests: every kept entry
// has a valid name and description, names are unique, at most 100.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(manifestV1))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"name":"a","description":"b","options":{}}]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		entries, _, err := parseManifest(raw)
		if err != nil {
			return
		}
		if len(entries) > maxCommands {
			t.Fatalf("%d entries", len(entries))
		}
		seen := map[string]bool{}
		for _, e := range entries {
			name, _ := e["name"].(string)
			if !commandName.MatchString(name) || seen[name] {
				t.Fatalf("bad or duplicate name %q", name)
			}
			seen[name] = true
		}
	})
}

func hexKey(pub ed25519.PublicKey) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 64)
	for _, c := range pub {
		b = append(b, digits[c>>4], digits[c&15])
	}
	return string(b)
}

// dispatchTypes are the Gateway dispatches onDispatch acts on.
var dispatchTypes = []string{
	"READY", "GUILD_CREATE", "GUILD_UPDATE", "CHANNEL_CREATE", "CHANNEL_UPDATE", "THREAD_CREATE",
	"THREAD_UPDATE", "CHANNEL_DELETE", "THREAD_DELETE", "THREAD_LIST_SYNC", "THREAD_MEMBER_UPDATE",
	"THREAD_MEMBERS_UPDATE", "MESSAGE_CREATE", "MESSAGE_UPDATE", "INTERACTION_CREATE",
}

// FuzzDispatch feeds arbitrary payloads of every Gateway dispatch the
// platform acts on through onDispatch: the bot's identity, the guild,
// channel and thread caches, message and interaction ingest (on a running
// platform whose REST calls go nowhere). It must never panic.
func FuzzDispatch(f *testing.F) {
	p, _ := fuzzPlatform(f)
	index := func(typ string) uint8 {
		for i, t := range dispatchTypes {
			if t == typ {
				return uint8(i)
			}
		}
		return 0
	}
	for _, c := range loadFixtures(f) {
		var d struct {
			T string          `json:"t"`
			D json.RawMessage `json:"d"`
		}
		if json.Unmarshal(c.Raw, &d) == nil && d.T != "" {
			f.Add(index(d.T), []byte(d.D))
		}
	}
	f.Add(index("READY"), []byte(`{"user":{"id":"9000"},"guilds":[{"id":"`+guildLab+`","unavailable":true}]}`))
	f.Add(index("GUILD_CREATE"), []byte(`{"id":"`+guildLab+`","name":"lab","channels":[{"id":"101","type":0}],"threads":[{"id":"102","parent_id":"101","type":11}]}`))
	f.Add(index("THREAD_LIST_SYNC"), []byte(`{"guild_id":"`+guildLab+`","threads":[{"id":"103","type":11}],"members":[{"id":"103","user_id":"9000"}]}`))
	f.Add(index("THREAD_MEMBERS_UPDATE"), []byte(`{"id":"102","added_members":[{"user_id":"9000"}],"removed_member_ids":["9000"]}`))
	f.Add(index("THREAD_DELETE"), []byte(`{"id":"102"}`))
	f.Add(index("MESSAGE_CREATE"), []byte(`{"id":"1","channel_id":"101","guild_id":"`+guildLab+`","author":{"id":"5"},"content":"<@9000> hi"}`))
	f.Add(index("INTERACTION_CREATE"), []byte(`{"id":"1","type":2,"guild_id":"`+guildLab+`","channel_id":"101","data":{"name":"x"}}`))
	f.Fuzz(func(t *testing.T, typ uint8, raw []byte) {
		p.onDispatch(dispatchTypes[int(typ)%len(dispatchTypes)], raw)
	})
}
