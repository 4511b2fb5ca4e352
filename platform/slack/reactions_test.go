package slack

import (
	"net/http"
	"testing"

	"connector/platform/slack/slacktest"
)

// TestReactionTurns: with reaction_triggers on, a reaction to the bot's
// message becomes the reactor's message "reaction:<added|removed>:<emoji>"
// in that message's thread, past the mention gate, with the reaction's
// event ts as its id (a retry of it is a duplicate); a reaction the
// native map does not know keeps its name.
func TestReactionTurns(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}} }, nil)
	const root, reply = "1768400000.000100", "1768400000.000200"
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: root, User: userAda, Text: "deploy?"})
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: reply, ThreadTS: root, User: teamA.BotUser, BotID: teamA.BotID, Text: "deployed"})
	react := func(id, typ, name, ts string) {
		t.Helper()
		e.event(t, teamA, id, map[string]any{"type": typ, "user": userAda, "reaction": name, "item_user": teamA.BotUser,
			"item": map[string]any{"type": "message", "channel": chanGeneral, "ts": reply}, "event_ts": ts}, http.StatusOK)
	}
	react("Ev1", "reaction_added", "+1", "1768400100.000100")
	d := e.sink.Next(t)
	src := d.Event.Source
	if d.Tenant != "t1" || d.Event.Text != "reaction:added:👍" || d.Event.MessageID != "1768400100.000100" || d.Event.ReplyToMessageID != root ||
		src.UserID.Value != userAda || src.ThreadID.Value != root || src.ChatType != "group" {
		t.Fatalf("%+v %+v", d.Event, src)
	}
	react("Ev1", "reaction_added", "+1", "1768400100.000100") // Slack's retry
	e.sink.Empty(t)
	react("Ev2", "reaction_removed", "warning", "1768400200.000100")
	if d := e.sink.Next(t); d.Event.Text != "reaction:removed:⚠\ufe0f" {
		t.Fatalf("%q", d.Event.Text)
	}
	react("Ev3", "reaction_added", "party-parrot", "1768400300.000100")
	if d := e.sink.Next(t); d.Event.Text != "reaction:added:party-parrot" {
		t.Fatalf("%q", d.Event.Text)
	}
}
