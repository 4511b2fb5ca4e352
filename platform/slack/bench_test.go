package slack

import (
	"encoding/json"
	"testing"

	"connector/platform/slack/slacktest"
)

// BenchmarkEnvelopeJobPlainMessage is what the Socket Mode reader (and the
// events route) spends on a plain channel message, no file and in no
// thread, before it hands the job on: it is never slow, so nothing of its
// tenant's settings should be evaluated there.
func BenchmarkEnvelopeJobPlainMessage(b *testing.B) {
	e := newEnv(b, func(c *Config) {
		c.Tenants["t1"] = TenantConfig{MentionPatterns: []string{`(?i)\bhermes\b`, `(?i)^hey bot`}}
	}, nil)
	body := map[string]any{
		"type": "message", "channel": chanGeneral, "channel_type": "channel", "user": userAda, "ts": "1768490000.000100",
		"text":   "deploy the release to staging when the checks pass, please",
		"blocks": json.RawMessage(`[{"type":"rich_text","block_id":"r1","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"deploy the release to staging when the checks pass, please"}]}]}]`),
	}
	var env envelope
	if err := json.Unmarshal(slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0BENCH01", body), &env); err != nil {
		b.Fatal(err)
	}
	received := e.now()
	b.ReportAllocs()
	for b.Loop() {
		if chat, tenant, slow, _ := e.p.envelopeJob(&env, received); chat == "" || tenant != "t1" || slow != "" {
			b.Fatalf("chat %q tenant %q slow %q", chat, tenant, slow)
		}
	}
}
