package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/refusedtest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/vault"
)

func execute(t *testing.T, e *env, tenant string, action string) contract.Result {
	t.Helper()
	a, err := contract.DecodeAction(json.RawMessage(action))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.p.Execute(ctx, tenant, &a)
}

// TestEgressBadGatewayNotSentAgain: a send Discord answers 502 for is
// answered platform_error after one request. discordgo sent it again up
// to three times, and Discord's edge answers 502 for a message its API
// may have posted: the chat got it up to four times.
func TestEgressBadGatewayNotSentAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	var posts atomic.Int64
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v9/channels/"+chanGeneral+"/messages" {
			return false
		}
		posts.Add(1)
		w.WriteHeader(http.StatusBadGateway)
		return true
	})
	r := execute(t, e, "t1", `{"op":"send","chat_id":"`+chanGeneral+`","content":"deployed","metadata":{}}`)
	if r.Success || r.Code != contract.CodePlatformError || posts.Load() != 1 {
		t.Fatalf("send = %+v after %d requests, want platform_error after one", r, posts.Load())
	}
}

// TestEgressPartlySent: a send, an edit or a follow_up whose later piece
// Discord refuses answers success with the first piece's id, its error
// saying how many pieces went out, in the words every platform uses
// (platform.SendParts): before, it answered a failure the gateway retries,
// posting the pieces that went out again. A prompt so refused fails
// platform_error (its buttons ride the last piece).
func TestEgressPartlySent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	var posts, refuseAt atomic.Int64
	refuseAt.Store(3)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v9/channels/"+chanGeneral+"/messages" || posts.Add(1) != refuseAt.Load() {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"message":"Missing Permissions","code":50013}`)
		return true
	})
	long := strings.Repeat("word ", 1000) // 5,000 code points: three pieces
	body, _ := json.Marshal(map[string]any{"op": "send", "chat_id": chanGeneral, "content": long, "reply_to": nil, "metadata": map[string]any{}})
	r := execute(t, e, "t1", string(body))
	msgs := e.fake.Messages(chanGeneral)
	if len(msgs) != 2 || !r.Success || r.Code != "" || r.MessageID != msgs[0].ID ||
		r.Error != "discord: HTTP 403 (code 50013: Missing Permissions) (sent 2 of 3 parts; the rest was not sent)" {
		t.Fatalf("send = %+v with %d messages, want the third piece refused, 2 of 3 sent and the first's id", r, len(msgs))
	}

	// edit: the edited message is the first part, the second is refused.
	posts.Store(0)
	refuseAt.Store(1)
	body, _ = json.Marshal(map[string]any{"op": "edit", "chat_id": chanGeneral, "message_id": msgs[0].ID, "content": strings.Repeat("word ", 500), "metadata": map[string]any{}})
	r = execute(t, e, "t1", string(body))
	if !r.Success || r.MessageID != msgs[0].ID || r.Error != "discord: HTTP 403 (code 50013: Missing Permissions) (sent 1 of 2 parts; the rest was not sent)" {
		t.Fatalf("edit = %+v, want the second piece refused, 1 of 2 sent and the edited message's id", r)
	}

	// prompt: the question's second piece, with the buttons, is refused.
	posts.Store(0)
	refuseAt.Store(2)
	body, _ = json.Marshal(map[string]any{"op": "prompt", "chat_id": chanGeneral, "content": strings.Repeat("word ", 500), "prompt_kind": "approval",
		"prompt_id": "p1", "options": []map[string]any{{"id": "once", "label": "Once"}}, "reply_to": nil, "metadata": map[string]any{}})
	r = execute(t, e, "t1", string(body))
	if r.Success || r.Code != contract.CodePlatformError || !strings.HasSuffix(r.Error, "(sent 1 of 2 parts; the rest was not sent)") {
		t.Fatalf("prompt = %+v, want platform_error, 1 of 2 sent", r)
	}
}

func TestEgressSendSplitsAndReplies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	long := strings.Repeat("word ", 300) + "\n```go\n" + strings.Repeat("fmt.Println(\"x\")\n", 120) + "```\nend"
	body, _ := json.Marshal(map[string]any{"op": "send", "chat_id": chanGeneral, "content": long, "reply_to": "6000", "metadata": map[string]any{}})
	r := execute(t, e, "t1", string(body))
	if !r.Success || r.MessageID == "" {
		t.Fatalf("send = %+v", r)
	}
	msgs := e.fake.Messages(chanGeneral)
	if len(msgs) < 2 {
		t.Fatalf("want a split send, got %d messages", len(msgs))
	}
	if msgs[0].ID != r.MessageID || msgs[0].ReplyTo != "6000" || msgs[1].ReplyTo != "" {
		t.Fatalf("first piece must reply and carry the result id: %+v", msgs)
	}
	for i, m := range msgs {
		if n := utf8.RuneCountInString(m.Content); n > MaxMessageLength {
			t.Fatalf("piece %d has %d code points", i, n)
		}
		if strings.Count(m.Content, "```")%2 != 0 {
			t.Fatalf("piece %d breaks a code fence:\n%s", i, m.Content)
		}
	}
	req, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "POST" && r.Path == "/api/v9/channels/101/messages"
	})
	if err != nil || !strings.Contains(string(req.Body), `"allowed_mentions":{"parse":["users"],"replied_user":true}`) ||
		req.Header.Get("Authorization") != "Bot "+testToken {
		t.Fatalf("send request = %s %v", req.Body, err)
	}
}

func TestEgressEditTypingChatInfo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	r := execute(t, e, "t1", `{"op":"send","chat_id":"102","content":"draft","reply_to":null,"metadata":{}}`)
	if !r.Success {
		t.Fatalf("send = %+v", r)
	}
	r2 := execute(t, e, "t1", `{"op":"edit","chat_id":"102","message_id":"`+r.MessageID+`","content":"final","metadata":{}}`)
	if !r2.Success || r2.MessageID != r.MessageID {
		t.Fatalf("edit = %+v", r2)
	}
	if m := e.fake.Messages(chanRandom); len(m) != 1 || m[0].Content != "final" || !m[0].Edited {
		t.Fatalf("messages = %+v", m)
	}
	if r := execute(t, e, "t1", `{"op":"typing","chat_id":"103","metadata":{}}`); !r.Success {
		t.Fatalf("typing = %+v", r)
	}
	if _, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool { return r.Path == "/api/v9/channels/103/typing" }); err != nil {
		t.Fatal(err)
	}
	info := execute(t, e, "t1", `{"op":"get_chat_info","chat_id":"103"}`)
	if !info.Success || info.ChatInfo == nil || info.ChatInfo.Type != "thread" || info.ChatInfo.Name != "Lab / #general / Deploy plan" {
		t.Fatalf("chat info = %+v %+v", info, info.ChatInfo)
	}
	if r := execute(t, e, "t1", `{"op":"edit","chat_id":"102","message_id":"123456","content":"x","metadata":{}}`); r.Success || r.Code != contract.CodePlatformError {
		t.Fatalf("edit of unknown message = %+v", r)
	}
}

func TestEgressDeclinesForeignChats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	before := len(e.fake.Requests())
	for _, a := range []string{
		`{"op":"send","chat_id":"201","content":"hi","reply_to":null,"metadata":{}}`, // t2's channel
		`{"op":"typing","chat_id":"201","metadata":{}}`,
		`{"op":"get_chat_info","chat_id":"201"}`,
		`{"op":"send","chat_id":"424242","content":"hi","reply_to":null,"metadata":{}}`, // unknown channel
	} {
		r := execute(t, e, "t1", a)
		if r.Success || r.Code != contract.CodeEgressDeclined || r.Error != contract.Declined("discord").Error {
			t.Fatalf("%s -> %+v", a, r)
		}
	}
	for _, a := range []string{
		`{"op":"send","chat_id":"../../users/@me","content":"hi","reply_to":null,"metadata":{}}`,
		`{"op":"send","chat_id":"101","content":"hi","reply_to":"x/../1","metadata":{}}`,
		`{"op":"send","chat_id":"101","content":"","reply_to":null,"metadata":{}}`,
	} {
		if r := execute(t, e, "t1", a); r.Success || r.Code != contract.CodeBadRequest {
			t.Fatalf("%s -> %+v", a, r)
		}
	}
	if r := execute(t, e, "t1", `{"op":"draft","chat_id":"101","draft_id":1,"content":"x"}`); r.Code != contract.CodeUnsupportedOp {
		t.Fatalf("draft = %+v", r)
	}
	for _, r := range e.fake.Requests()[before:] {
		if strings.Contains(r.Path, "/messages") || strings.Contains(r.Path, "/typing") {
			t.Fatalf("a declined op reached Discord: %s %s", r.Method, r.Path)
		}
	}
}

func TestEgressFollowUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	token := "followup-token-secret"
	e.fake.AddInteractionToken(token)
	key := "agent:main:discord:group:101:501"
	if err := e.vault.Put(t.Context(), vault.Key{Tenant: "t1", SessionKey: key, Kind: vault.KindDiscordInteractionToken},
		vault.Entry{Value: vault.NewSecret(token), Ref: "9000/" + chanGeneral}); err != nil {
		t.Fatal(err)
	}
	action := `{"op":"follow_up","session_key":"` + key + `","kind":"discord.interaction_token","content":"done!","metadata":{}}`
	r := execute(t, e, "t1", action)
	if !r.Success || r.MessageID == "" {
		t.Fatalf("follow_up = %+v", r)
	}
	req, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "POST" && r.Path == "/api/v9/webhooks/9000/"+token
	})
	if err != nil || req.Query != "wait=true" || !strings.Contains(string(req.Body), `"content":"done!"`) {
		t.Fatalf("webhook request = %+v %v", req, err)
	}
	// Another tenant naming the same session finds nothing.
	if r := execute(t, e, "t2", action); r.Success || r.Code != contract.CodeCapabilityMissing {
		t.Fatalf("foreign follow_up = %+v", r)
	}
	// Absent session.
	if r := execute(t, e, "t1", strings.Replace(action, key, "agent:main:discord:dm:1", 1)); r.Success || r.Code != contract.CodeCapabilityMissing {
		t.Fatalf("absent follow_up = %+v", r)
	}
	// Unknown kind.
	if r := execute(t, e, "t1", strings.Replace(action, "discord.interaction_token", "slack.response_url", 1)); r.Code != contract.CodeBadRequest {
		t.Fatalf("kind = %+v", r)
	}
	for _, l := range []string{e.logs.Text()} {
		if strings.Contains(l, token) {
			t.Fatal("token in logs")
		}
	}
}

func TestFollowUpExpiredToken(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	v := vault.NewMemory(vault.Config{Clock: clk})
	key := vault.Key{Tenant: "t1", SessionKey: "s", Kind: vault.KindDiscordInteractionToken}
	if err := v.Put(t.Context(), key, vault.Entry{Value: vault.NewSecret("tok"), Ref: "9000/" + chanGeneral}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(15*time.Minute + time.Second)
	e := newEnv(t, discordtest.Options{}, nil)
	e.p.vault = v
	r := execute(t, e, "t1", `{"op":"follow_up","session_key":"s","kind":"discord.interaction_token","content":"late","metadata":{}}`)
	if r.Success || r.Code != contract.CodeCapabilityMissing {
		t.Fatalf("expired follow_up = %+v", r)
	}
}

// TestErrorPathsLogNoSecrets drives follow-ups into a 404, a 429 beyond the
// deadline and a dropped connection: every error names the failure, and no
// log line or result holds the interaction token or the bot token.
func TestErrorPathsLogNoSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.RequestTimeout = 2 * time.Second })
	e.startReady(t)
	token := "errpath-interaction-token-abcdef123456"
	key := "agent:main:discord:group:101:501"
	if err := e.vault.Put(t.Context(), vault.Key{Tenant: "t1", SessionKey: key, Kind: vault.KindDiscordInteractionToken},
		vault.Entry{Value: vault.NewSecret(token), Ref: "9000/" + chanGeneral}); err != nil {
		t.Fatal(err)
	}
	action := `{"op":"follow_up","session_key":"` + key + `","kind":"discord.interaction_token","content":"x","metadata":{}}`
	var results []contract.Result
	// 1. Unknown webhook (404).
	results = append(results, execute(t, e, "t1", action))
	// 2. 429 far beyond the deadline.
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if !strings.Contains(r.URL.Path, "/webhooks/") {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"message":"You are being rate limited.","retry_after":60,"global":false}`)
		return true
	})
	results = append(results, execute(t, e, "t1", action))
	// 3. The connection dropped mid-request.
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if !strings.Contains(r.URL.Path, "/webhooks/") {
			return false
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return true
	})
	// A fresh token: the 429 above emptied the first one's bucket.
	token2 := token + "-second"
	if err := e.vault.Put(t.Context(), vault.Key{Tenant: "t1", SessionKey: key + "x", Kind: vault.KindDiscordInteractionToken},
		vault.Entry{Value: vault.NewSecret(token2), Ref: "9000/" + chanGeneral}); err != nil {
		t.Fatal(err)
	}
	results = append(results, execute(t, e, "t1", strings.Replace(action, key, key+"x", 1)))
	wantCodes := []string{contract.CodePlatformError, contract.CodeRateLimited, contract.CodeUnavailable}
	for i, r := range results {
		if r.Success || r.Code != wantCodes[i] {
			t.Errorf("case %d = %+v, want code %s", i, r, wantCodes[i])
		}
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), token) {
			t.Errorf("result %d holds the token: %s", i, b)
		}
	}
	logs := e.logs.Text()
	if !strings.Contains(logs, "discord egress failed") {
		t.Fatalf("failures were not logged:\n%s", logs)
	}
	for _, s := range []string{token, testToken} {
		if strings.Contains(logs, s) {
			t.Fatalf("a secret is in the logs:\n%s", logs)
		}
	}
}

// TestEgressWhileDiscordIsDown: with Discord unreachable the Gateway's
// guild snapshot never loads, so no chat's owner can be checked. That is
// answered with the retryable "unavailable" (never the decline the gateway
// treats as final), and the text carries no internal URL or address.
func TestEgressWhileDiscordIsDown(t *testing.T) {
	t.Parallel()
	down := refusedtest.URL(t)
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.APIBaseURL = down })
	_, port, _ := strings.Cut(strings.TrimPrefix(down, "http://"), ":")
	for _, a := range []string{
		`{"op":"send","chat_id":"101","content":"hi","reply_to":null,"metadata":{}}`,
		`{"op":"typing","chat_id":"101","metadata":{}}`,
		`{"op":"get_chat_info","chat_id":"101"}`,
	} {
		r := execute(t, e, "t1", a)
		if r.Success || r.Code != contract.CodeUnavailable {
			t.Fatalf("%s while Discord is down = %+v, want code unavailable", a, r)
		}
		for _, leak := range []string{"127.0.0.1", port, "http", "dial", "discord.com/api"} {
			if strings.Contains(r.Error, leak) {
				t.Fatalf("error %q leaks %q", r.Error, leak)
			}
		}
	}
	_, err := e.p.ChatTenant(waitCtx(t), "101")
	if !errors.Is(err, platform.ErrUnavailable) {
		t.Fatalf("ChatTenant while Discord is down = %v, want platform.ErrUnavailable", err)
	}
}

// TestEgressSendLongWhitespaceTail sends text whose last 2,000-code-point
// stretch is only form feeds: no blank piece may reach Discord, which
// refuses it (50006) after the first piece went out.
func TestEgressSendLongWhitespaceTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	content := "0G" + strings.Repeat("\f", 3372)
	body, _ := json.Marshal(map[string]any{"op": "send", "chat_id": chanGeneral, "content": content, "reply_to": nil, "metadata": map[string]any{}})
	if r := execute(t, e, "t1", string(body)); !r.Success {
		t.Fatalf("send = %+v", r)
	}
	msgs := e.fake.Messages(chanGeneral)
	if len(msgs) != 1 || msgs[0].Content != content[:MaxMessageLength] {
		t.Fatalf("want the first 2,000 code points as one message, got %d messages", len(msgs))
	}
}
