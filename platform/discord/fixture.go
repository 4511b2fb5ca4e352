package discord

import (
	"context"
	"encoding/json"
	"fmt"

	"connector/platform"
	"connector/session"
)

// fixtureContext is the "context" of a platform_events.json case: what the
// native adapter consulted besides the payload.
type fixtureContext struct {
	BotUserID               string       `json:"bot_user_id"`
	Channel                 *wireChannel `json:"channel"`
	Parent                  *wireChannel `json:"parent"`
	Guild                   *wireChannel `json:"guild"`
	BotParticipatesInThread bool         `json:"bot_participates_in_thread"`
	AdapterConfig           struct {
		AutoThread              *bool    `json:"auto_thread"`
		RequireMention          *bool    `json:"require_mention"`
		FreeResponseChannels    []string `json:"free_response_channels"`
		NoThreadChannels        []string `json:"no_thread_channels"`
		VoiceLinkedTextChannels []string `json:"voice_linked_text_channels"`
		AllowBots               string   `json:"allow_bots"`
	} `json:"adapter_config"`
}

// NormalizeFixture maps a fixture case's raw Gateway dispatch (MESSAGE_CREATE,
// MESSAGE_UPDATE or INTERACTION_CREATE) and its context (cached channel,
// parent and guild, bot_user_id, adapter_config, bot_participates_in_thread)
// to the outcome of the turn it starts: the SessionSource the native adapter
// builds and the event's fields (platform.Outcome). It runs the same
// normalization as live ingest, with the context standing in for the cache;
// an auto-thread gets the message's id, as Discord gives a message-started
// thread. An event the adapter would drop returns an error.
func NormalizeFixture(raw, ctxJSON json.RawMessage) (session.Outcome, error) {
	var d wireDispatch
	if err := json.Unmarshal(raw, &d); err != nil {
		return session.Outcome{}, fmt.Errorf("discord fixture: raw: %w", err)
	}
	var fc fixtureContext
	if len(ctxJSON) > 0 {
		if err := json.Unmarshal(ctxJSON, &fc); err != nil {
			return session.Outcome{}, fmt.Errorf("discord fixture: context: %w", err)
		}
	}
	ac := fc.AdapterConfig
	n := &normalizer{
		look:  newFixtureLookup(&fc),
		botID: fc.BotUserID,
		pol: newPolicy(TenantConfig{
			AutoThread: ac.AutoThread, RequireMention: ac.RequireMention,
			FreeResponseChannels: ac.FreeResponseChannels, NoThreadChannels: ac.NoThreadChannels,
			VoiceLinkedTextChannels: ac.VoiceLinkedTextChannels, AllowBots: ac.AllowBots,
		}),
		startThread: threadFromMessage,
	}
	t, err := normalizeDispatch(context.Background(), n, d.T, d.D)
	if err != nil {
		return session.Outcome{}, fmt.Errorf("discord fixture: %w", err)
	}
	return platform.Outcome(&t.ev), nil
}

// normalizeDispatch decodes and normalizes one dispatch that can start a turn.
func normalizeDispatch(ctx context.Context, n *normalizer, typ string, d json.RawMessage) (*turn, error) {
	switch typ {
	case "MESSAGE_CREATE", "MESSAGE_UPDATE":
		var m wireMessage
		if err := json.Unmarshal(d, &m); err != nil {
			return nil, drop("malformed")
		}
		return n.message(ctx, &m, typ == "MESSAGE_UPDATE")
	case "INTERACTION_CREATE":
		var in wireInteraction
		if err := json.Unmarshal(d, &in); err != nil {
			return nil, drop("malformed")
		}
		return n.interaction(ctx, &in)
	}
	return nil, drop("unsupported_event")
}

// threadFromMessage is the fixture path's threadStarter.
func threadFromMessage(_ context.Context, _, messageID, _ string) (string, error) {
	return messageID, nil
}

// fixtureLookup answers lookups from a fixture's context.
type fixtureLookup struct {
	chans  map[string]chanInfo
	guilds map[string]string
	joined string
}

func newFixtureLookup(fc *fixtureContext) *fixtureLookup {
	l := &fixtureLookup{chans: map[string]chanInfo{}, guilds: map[string]string{}}
	for _, c := range []*wireChannel{fc.Channel, fc.Parent} {
		if c != nil && c.ID != "" {
			l.chans[c.ID] = infoFrom(c)
		}
	}
	if fc.Guild != nil {
		l.guilds[fc.Guild.ID] = fc.Guild.Name
	}
	if fc.BotParticipatesInThread && fc.Channel != nil {
		l.joined = fc.Channel.ID
	}
	return l
}

func (l *fixtureLookup) channel(_ context.Context, id string) (chanInfo, error) {
	if c, ok := l.chans[id]; ok {
		return c, nil
	}
	return chanInfo{}, errNotFound
}

func (l *fixtureLookup) guildName(_ context.Context, id string) (string, error) {
	if name, ok := l.guilds[id]; ok {
		return name, nil
	}
	return "", errNotFound
}

func (l *fixtureLookup) participates(threadID string) bool {
	return threadID != "" && threadID == l.joined
}
