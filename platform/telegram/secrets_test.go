package telegram

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connector/contract"
	"connector/internal/refusedtest"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
)

// TestNoSecretInLogsOrResults captures every log line (debug level), result
// and status of runs that go through the paths that handle errors and
// credentials — webhook and polling ingest, wrong webhook secrets, API
// errors, a 429, an unreachable API, a rejected token — and checks that
// neither the bot token (nor its secret half) nor the webhook secret
// appears anywhere.
func TestNoSecretInLogsOrResults(t *testing.T) {
	var seen []string
	record := func(r contract.Result) { seen = append(seen, r.Error) }
	status := func(p *Platform) { seen = append(seen, p.Status().Detail) }

	// Webhook mode, with traffic and failures.
	w := webhookEnv(t, nil)
	w.post(t, fixture(t, "telegram_shared_private_text").Raw)
	w.postSecret(t, fixture(t, "telegram_shared_basic_group").Raw, "wrong-"+testSecret)
	w.post(t, []byte("{not json"))
	w.post(t, fixture(t, "telegram_shared_supergroup_unicode_title").Raw)
	w.post(t, []byte(callbackRaw))
	w.fake.Fail("sendMessage", telegramtest.Failure{Code: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1})
	w.fake.Fail("sendMessage", telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"})
	w.fake.Fail("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: can't parse entities: bad"})
	record(w.act(t, "t1", sendAction("123456789", "one")))
	record(w.act(t, "t1", sendAction("123456789", "two")))
	record(w.act(t, "t1", contract.Action{Op: contract.OpEdit, ChatID: "123456789", MessageID: "424242", Content: "x"}))
	record(w.act(t, "t1", contract.Action{Op: contract.OpGetChatInfo, ChatID: "123456789"}))
	record(w.act(t, "t2", sendAction("123456789", "not yours")))
	w.calls(t, "answerCallbackQuery", 1)
	status(w.p)

	// Polling with getUpdates failures.
	p := newEnv(t, nil)
	p.fake.Fail("getUpdates", telegramtest.Failure{Code: 500, Description: "Internal Server Error"})
	p.fake.Fail("getUpdates", telegramtest.Failure{Code: 409, Description: "Conflict: terminated by other getUpdates request"})
	p.run(t)
	p.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	p.fake.Enqueue(fixture(t, "telegram_shared_private_text").Raw)
	p.sink.Next(t)
	status(p.p)

	// Unreachable API: startup and egress.
	u := newEnv(t, func(c *Config) { c.APIServerURL = refusedtest.URL(t) })
	u.run(t)
	u.waitStatus(t, func(st platform.Status) bool { return strings.Contains(st.Detail, "cannot reach") })
	record(u.act(t, "t1", sendAction("123456789", "anyone?")))
	record(u.act(t, "t1", contract.Action{Op: contract.OpTyping, ChatID: "123456789"}))
	status(u.p)

	// A rejected token.
	other := telegramtest.New(t, "7012345678:ANOTHER-token")
	b := newEnv(t, func(c *Config) { c.APIServerURL = other.URL })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := b.p.Run(ctx, b.sink); err != nil {
		seen = append(seen, err.Error())
	}
	status(b.p)

	logs := w.logs.String() + p.logs.String() + u.logs.String() + b.logs.String()
	// The scenario did reach the interesting paths.
	for _, want := range []string{"429", "blocked by the user", "getUpdates", "unreachable", "rejected the bot token", "dropped"} {
		if !strings.Contains(logs+strings.Join(seen, "\n"), want) {
			t.Errorf("no %q in the captured output; the scenario missed a path", want)
		}
	}
	seen = append(seen, logs)
	_, tokenSecret, _ := strings.Cut(testToken, ":")
	for _, text := range seen {
		for _, secret := range []string{testToken, tokenSecret, testSecret} {
			if strings.Contains(text, secret) {
				t.Fatalf("a secret appears in captured output:\n%s", text)
			}
		}
	}
}

func TestScrub(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WebhookSecret = testSecret })
	_, tokenSecret, _ := strings.Cut(testToken, ":")
	got := e.p.errorText(errors.New("GET /bot" + testToken + "/x " + tokenSecret + " " + testSecret))
	if strings.Contains(got, tokenSecret) || strings.Contains(got, testSecret) || !strings.Contains(got, "[redacted]") {
		t.Errorf("scrubbed %q", got)
	}
	// The webhook mounts no route in polling mode, so no one can post to it.
	if e.p.Routes() != nil {
		t.Error("routes in polling mode")
	}
}
