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
		if chat, tenant, slow, _ := e.p.envelopeJob(&env, received, true); chat == "" || tenant != "t1" || slow != "" {
			b.Fatalf("chat %q tenant %q slow %q", chat, tenant, slow)
		}
	}
}

// TestReplayJudgesNoSettingsAgain: a slow message (a thread reply with
// blocks, under mention patterns) has its tenant's settings judged as it
// arrives (settingsDrop: its blocks decoded, the patterns run), to tell
// whether the intake takes it; its replay from the intake does not judge
// them again (normalize alone does), and costs fewer allocations than the
// arrival. Before, the replay decoded its blocks and ran the patterns a
// second time.
func TestReplayJudgesNoSettingsAgain(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Tenants["t1"] = TenantConfig{MentionPatterns: []string{`(?i)\bhermes\b`, `(?i)^hey bot`}}
	}, nil)
	body := map[string]any{
		"type": "message", "channel": chanGeneral, "channel_type": "channel", "user": userAda, "ts": "1768490000.000200",
		"thread_ts": "1768490000.000100", "text": "hey bot, deploy the release to staging",
		"blocks": json.RawMessage(`[{"type":"rich_text","block_id":"r1","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"hey bot, deploy the release to staging"}]}]}]`),
	}
	var env envelope
	if err := json.Unmarshal(slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev0REPLAY1", body), &env); err != nil {
		t.Fatal(err)
	}
	received := e.now()
	if _, tenant, slow, _ := e.p.envelopeJob(&env, received, true); tenant != "t1" || slow == "" {
		t.Fatalf("arriving: tenant %q slow %q, want t1's slow message", tenant, slow)
	}
	if _, tenant, slow, _ := e.p.envelopeJob(&env, received, false); tenant != "t1" || slow != "" {
		t.Fatalf("replayed: tenant %q slow %q, want t1's, not judged", tenant, slow)
	}
	arriving := testing.AllocsPerRun(100, func() { e.p.envelopeJob(&env, received, true) })
	replayed := testing.AllocsPerRun(100, func() { e.p.envelopeJob(&env, received, false) })
	if replayed >= arriving {
		t.Fatalf("a replay allocates %v, its arrival %v: want fewer (its settings not judged again)", replayed, arriving)
	}
}
