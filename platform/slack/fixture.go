package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/slack-go/slack"
	"go.yaml.in/yaml/v3"

	"connector/internal/clock"
	"connector/platform"
	"connector/session"
)

// fixtureContext is the "context" of a Slack case of
// platform_events_slack_whatsapp.json: what the native adapter knew or
// asked Slack besides the payload.
type fixtureContext struct {
	BotUserID            string                     `json:"bot_user_id"`
	TeamBotUserIDs       map[string]string          `json:"team_bot_user_ids"`
	UsersInfo            map[string]json.RawMessage `json:"users_info"`
	ConversationsInfo    map[string]json.RawMessage `json:"conversations_info"`
	ConversationsReplies map[string][]slack.Message `json:"conversations_replies"`
	BotMessageTS         []string                   `json:"bot_message_ts"`
	MentionedThreads     []string                   `json:"mentioned_threads"`
	ActiveThreadSessions []string                   `json:"active_thread_sessions"`
	SeenEventIDs         []string                   `json:"seen_event_ids"`
	ProcessedMessageTS   []string                   `json:"processed_message_ts"`
	AdapterConfig        json.RawMessage            `json:"adapter_config"`
}

// NormalizeFixture maps a Slack case's raw payload (an Events API
// envelope, a slash command's fields, or an interaction payload) and its
// context to what the connector makes of it: the turn's source and event,
// or a drop. It runs live ingest's decoding and normalization with the
// context standing in for the Web API and the adapter's memory, under the
// case's adapter_config as the tenant's knobs. `connector conformance
// events` calls it for every slack case.
func NormalizeFixture(raw, ctxJSON json.RawMessage) (session.Outcome, error) {
	var fc fixtureContext
	if len(ctxJSON) > 0 && string(ctxJSON) != "null" {
		if err := json.Unmarshal(ctxJSON, &fc); err != nil {
			return session.Outcome{}, fmt.Errorf("slack fixture: context: %w", err)
		}
	}
	var tc TenantConfig
	if len(fc.AdapterConfig) > 0 {
		// JSON is YAML: the knobs are read as the config file's are.
		if err := yaml.Unmarshal(fc.AdapterConfig, &tc); err != nil {
			return session.Outcome{}, fmt.Errorf("slack fixture: adapter_config: %w", err)
		}
	}
	pol, err := newPolicy(tc, false)
	if err != nil {
		return session.Outcome{}, fmt.Errorf("slack fixture: adapter_config: %w", err)
	}
	var probe struct {
		Type    string `json:"type"`
		Command string `json:"command"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return session.Outcome{}, fmt.Errorf("slack fixture: raw: %w", err)
	}
	ctx := context.Background()
	look := &fixtureLookup{fc: &fc}
	switch {
	case probe.Command != "":
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			return session.Outcome{}, fmt.Errorf("slack fixture: slash command: %w", err)
		}
		c := slashFromFields(func(k string) string { s, _ := fields[k].(string); return s })
		if drop := pol.refusal(c.UserID, strings.HasPrefix(c.ChannelID, "D")); drop != "" {
			return session.Outcome{Drop: drop}, nil
		}
		ev := slashEvent(&c)
		return platform.Outcome(&ev), nil
	case probe.Type == string(slack.InteractionTypeBlockActions):
		var ic slack.InteractionCallback
		if err := json.Unmarshal(raw, &ic); err != nil {
			return session.Outcome{}, fmt.Errorf("slack fixture: interaction: %w", err)
		}
		p, ok := pressOf(&ic)
		if !ok {
			return session.Outcome{Drop: dropForeignAction}, nil
		}
		if drop := pol.refusal(p.user, strings.HasPrefix(p.channel, "D")); drop != "" {
			return session.Outcome{Drop: drop}, nil
		}
		ev := p.event(look.user(ctx, p.team, p.user).name, look.channelName(ctx, p.team, p.channel))
		return platform.Outcome(&ev), nil
	}
	var env envelope
	if err := decodeEnvelope(raw, &env); err != nil {
		return session.Outcome{}, err
	}
	var ev wireEvent
	if env.InnerEvent == nil || json.Unmarshal(*env.InnerEvent, &ev) != nil {
		return session.Outcome{Drop: dropMalformed}, nil
	}
	bot := cmp.Or(fc.TeamBotUserIDs[env.installTeam()], fc.BotUserID)
	m, ok := newMessage(&env, &ev)
	if ev.Type == "reaction_added" || ev.Type == "reaction_removed" {
		var drop string
		if m, drop = reactionTurn(ctx, look, &env, &ev, pol, bot, nil); drop != "" {
			return session.Outcome{Drop: drop}, nil
		}
		ok = true
	}
	switch {
	case !ok:
		return session.Outcome{Drop: dropUnsupported}, nil
	case slices.Contains(fc.SeenEventIDs, m.dedupeKey):
		return session.Outcome{Drop: dropDuplicate}, nil
	case m.edit && slices.Contains(fc.ProcessedMessageTS, m.ev.TS):
		return session.Outcome{Drop: dropEditOfProcessed}, nil
	}
	if b := fc.TeamBotUserIDs[m.scope]; b != "" {
		bot = b
	}
	n := &normalizer{pol: pol, look: look, state: &fixtureState{fc: &fc}, bot: bot, clock: clock.System}
	t, drop, err := n.normalize(ctx, &m)
	if err != nil {
		return session.Outcome{}, err
	}
	if drop != "" {
		return session.Outcome{Drop: drop}, nil
	}
	return platform.Outcome(&t.ev), nil
}

// slashFromFields reads a slash command from its form fields (get returns
// "" for an absent one), as slack.SlashCommandParse reads them, with the
// thread anchor (_slash_thread_id) besides.
func slashFromFields(get func(string) string) slashCommand {
	return slashCommand{
		SlashCommand: slack.SlashCommand{
			TeamID: get("team_id"), ChannelID: get("channel_id"), UserID: get("user_id"), UserName: get("user_name"),
			Command: get("command"), Text: get("text"), ResponseURL: get("response_url"), APIAppID: get("api_app_id"),
			TriggerID: get("trigger_id"),
		},
		thread: cmp.Or(get("thread_ts"), get("message_ts")),
	}
}

// fixtureLookup answers lookups from a fixture's context.
type fixtureLookup struct{ fc *fixtureContext }

func (l *fixtureLookup) user(_ context.Context, _, id string) userInfo {
	var r struct {
		OK   bool       `json:"ok"`
		User slack.User `json:"user"`
	}
	if id == "" {
		return userInfo{}
	}
	if raw, ok := l.fc.UsersInfo[id]; !ok || json.Unmarshal(raw, &r) != nil || !r.OK {
		return userInfo{name: id}
	}
	return parseUser(&r.User, id)
}

func (l *fixtureLookup) channelName(ctx context.Context, team, id string) string {
	var r struct {
		OK      bool          `json:"ok"`
		Channel slack.Channel `json:"channel"`
	}
	if raw, ok := l.fc.ConversationsInfo[id]; !ok || json.Unmarshal(raw, &r) != nil || !r.OK {
		return id
	}
	return channelName(&r.Channel, id, func(peer string) string { return l.user(ctx, team, peer).name })
}

func (l *fixtureLookup) history(_ context.Context, _, channel, ts string) ([]slack.Message, bool) {
	msgs := l.fc.ConversationsReplies[channel+":"+ts]
	return msgs, len(msgs) > 0
}

func (l *fixtureLookup) reacted(ctx context.Context, team, channel, ts string) ([]slack.Message, bool) {
	return l.history(ctx, team, channel, ts)
}

// fixtureState answers the adapter memory from a fixture's context.
type fixtureState struct{ fc *fixtureContext }

// has answers a marker (threadMark's key) from the context's lists, the
// native adapter's: the bot's posts and the mentioned threads listed as
// "<team>:<ts>" or by their ts alone, the active threads as
// "<team>:<channel>:<ts>".
func (s *fixtureState) has(_ context.Context, kind markKind, key string) (bool, error) {
	parts := strings.SplitN(key, ":", 4)
	if len(parts) < 3 {
		return false, nil
	}
	team, channel, ts := parts[0], parts[1], parts[2]
	switch kind {
	case markPosted:
		return slices.Contains(s.fc.BotMessageTS, team+":"+ts) || slices.Contains(s.fc.BotMessageTS, ts), nil
	case markMentioned:
		return slices.Contains(s.fc.MentionedThreads, team+":"+ts) || slices.Contains(s.fc.MentionedThreads, ts), nil
	case markActive:
		return slices.Contains(s.fc.ActiveThreadSessions, team+":"+channel+":"+ts), nil
	}
	return false, nil
}

func (s *fixtureState) set(context.Context, markKind, string) error { return nil }
