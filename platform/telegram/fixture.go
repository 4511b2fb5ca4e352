package telegram

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-telegram/bot/models"

	"connector/contract"
	"connector/platform"
	"connector/session"
)

// NormalizeFixture maps a fixture case's raw Bot API Update, with its
// context (the bot, and the native adapter_config's group_topics/dm_topics),
// to the outcome of the turn it starts: the Source the native adapter
// builds and the event's fields (platform.Outcome). It runs the same decoding,
// normalization and group gate (with the native default settings) as live
// ingest; `connector conformance events` calls it for every telegram case
// of testdata/platform_events.json.
func NormalizeFixture(raw, context json.RawMessage) (session.Outcome, error) {
	var fc fixtureContext
	if len(context) > 0 && string(context) != "null" {
		if err := json.Unmarshal(context, &fc); err != nil {
			return session.Outcome{}, fmt.Errorf("telegram: fixture context: %w", err)
		}
	}
	group, err := topicNames(bindingsOf(fc.AdapterConfig.GroupTopics), false)
	if err != nil {
		return session.Outcome{}, fmt.Errorf("telegram: fixture group_topics: %w", err)
	}
	dm, err := topicNames(bindingsOf(fc.AdapterConfig.DMTopics), true)
	if err != nil {
		return session.Outcome{}, fmt.Errorf("telegram: fixture dm_topics: %w", err)
	}
	m := mapping{botID: fc.Bot.ID, botUsername: fc.Bot.Username, groupTopics: group, dmTopics: dm}
	var u models.Update
	if err := decodeUpdate(raw, &u); err != nil {
		return session.Outcome{}, err
	}
	in, drop := normalize(&u, &m)
	if drop == "" && in.msg != nil {
		drop = defaultPolicy.admit(in.msg, &m)
	}
	if drop != "" {
		return session.Outcome{}, fmt.Errorf("telegram: the update is not ingested (%s)", drop)
	}
	return platform.Outcome(&in.event), nil
}

// decodeUpdate parses one Bot API Update (a webhook body or a fixture).
func decodeUpdate(body []byte, u *models.Update) error {
	if len(body) == 0 || body[0] != '{' {
		return errors.New("telegram: update is not a JSON object")
	}
	if err := json.Unmarshal(body, u); err != nil {
		return fmt.Errorf("telegram: decode update: %w", err)
	}
	return nil
}

// fixtureContext is a fixture case's context object.
type fixtureContext struct {
	Bot struct {
		ID       int64  `json:"id"`
		Username string `json:"username"`
	} `json:"bot"`
	AdapterConfig struct {
		GroupTopics []fixtureBinding `json:"group_topics"`
		DMTopics    []fixtureBinding `json:"dm_topics"`
	} `json:"adapter_config"`
}

type fixtureBinding struct {
	ChatID contract.ID `json:"chat_id"`
	Topics []struct {
		ThreadID contract.ID `json:"thread_id"`
		Name     string      `json:"name"`
	} `json:"topics"`
}

func bindingsOf(fb []fixtureBinding) []TopicBinding {
	out := make([]TopicBinding, 0, len(fb))
	for _, b := range fb {
		tb := TopicBinding{ChatID: string(b.ChatID)}
		for _, t := range b.Topics {
			tb.Topics = append(tb.Topics, Topic{ThreadID: string(t.ThreadID), Name: t.Name})
		}
		out = append(out, tb)
	}
	return out
}
