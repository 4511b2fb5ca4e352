package slack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/slack-go/slack/slackevents"
)

// envelope is an Events API request body (and a Socket Mode events_api
// payload): slackevents' callback envelope, plus the url_verification
// challenge.
type envelope struct {
	slackevents.EventsAPICallbackEvent
	Challenge string `json:"challenge"`
}

// installTeam is the workspace whose installation the event was delivered
// to: its first authorization's, else its team_id. Its bot token answers
// the event, and its tenant receives it. In a Slack Connect channel team_id
// is the workspace the event happened in (the channel's host), which may
// not have the app installed, or not in the channel: Slack names the
// installation that got the event in authorizations (as its SDKs read it).
func (e *envelope) installTeam() string {
	for _, a := range e.Authorizations {
		if a.TeamID != "" {
			return a.TeamID
		}
	}
	return e.TeamID
}

// botUser is the bot user the event was delivered for (its first bot
// authorization), the fallback mention target while the workspace's own
// is unknown.
func (e *envelope) botUser() string {
	for _, a := range e.Authorizations {
		if a.IsBot && a.UserID != "" {
			return a.UserID
		}
	}
	return ""
}

// decodeEnvelope parses a request body. It fails on anything but a JSON
// object with a type.
func decodeEnvelope(body []byte, e *envelope) error {
	if len(bytes.TrimLeft(body, " \t\r\n")) == 0 || bytes.TrimLeft(body, " \t\r\n")[0] != '{' {
		return errors.New("slack: the body is not a JSON object")
	}
	if err := json.Unmarshal(body, e); err != nil {
		return fmt.Errorf("slack: decode event envelope: %w", err)
	}
	if e.Type == "" {
		return errors.New("slack: the envelope has no type")
	}
	return nil
}

// wireEvent is the inner event of an event_callback, as ingest reads it:
// the fields the native adapter reads, in the shapes Slack sends (team as
// a string or an object; blocks walked as they are). slackevents' typed
// events drop some of them (bot_profile, user_profile, app_id, team), so
// the inner event is read here.
type wireEvent struct {
	Type        string          `json:"type"`
	Subtype     string          `json:"subtype"`
	Text        string          `json:"text"`
	User        string          `json:"user"`
	TS          string          `json:"ts"`
	ThreadTS    string          `json:"thread_ts"`
	EventTS     string          `json:"event_ts"`
	Channel     string          `json:"channel"`
	ChannelType string          `json:"channel_type"`
	TeamID      string          `json:"team_id"`
	Team        json.RawMessage `json:"team"`
	ClientMsgID string          `json:"client_msg_id"`
	BotID       string          `json:"bot_id"`
	BotProfile  json.RawMessage `json:"bot_profile"`
	AppID       string          `json:"app_id"`
	UserProfile json.RawMessage `json:"user_profile"`
	Blocks      json.RawMessage `json:"blocks"`
	Attachments []wireUnfurl    `json:"attachments"`
	Files       []wireFile      `json:"files"`
	// Message is the edited message of a message_changed event.
	Message *wireEvent `json:"message"`
	Edited  *struct {
		TS string `json:"ts"`
	} `json:"edited"`
	// Tokens lists the revoked tokens of tokens_revoked.
	Tokens *struct {
		Bot []string `json:"bot"`
	} `json:"tokens"`
	// Reaction, ItemUser and Item are a reaction_added or
	// reaction_removed event's: the reaction's name, the author of the
	// reacted-to item, and the item.
	Reaction string `json:"reaction"`
	ItemUser string `json:"item_user"`
	Item     *struct {
		Type    string `json:"type"`
		Channel string `json:"channel"`
		TS      string `json:"ts"`
	} `json:"item"`
}

// wireUnfurl is one entry of a message's attachments: a link unfurl.
type wireUnfurl struct {
	Title       string `json:"title"`
	TitleLink   string `json:"title_link"`
	FromURL     string `json:"from_url"`
	Text        string `json:"text"`
	Footer      string `json:"footer"`
	Fallback    string `json:"fallback"`
	IsMsgUnfurl bool   `json:"is_msg_unfurl"`
	// Blocks are the attachment's own blocks (a pasted table arrives so).
	Blocks json.RawMessage `json:"blocks"`
}

// wireFile is one of a message's files.
type wireFile struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	Mimetype           string `json:"mimetype"`
	Subtype            string `json:"subtype"`
	Size               int64  `json:"size"`
	URLPrivate         string `json:"url_private"`
	URLPrivateDownload string `json:"url_private_download"`
	FileAccess         string `json:"file_access"`
}

// teamOf reads a team field: a string, or an object with an id.
func teamOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.ID
	}
	return ""
}

// profileIsBot reads user_profile.is_bot.
func profileIsBot(raw json.RawMessage) bool {
	var p struct {
		IsBot bool `json:"is_bot"`
	}
	return len(raw) > 0 && json.Unmarshal(raw, &p) == nil && p.IsBot
}
