package whatsapp

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"connector/contract"
	"connector/internal/pytext"
	"connector/session"
)

// This file owns the Meta webhook payload (the objects the connector reads
// of it) and its mapping to MessageEvents, exactly as the native adapter's
// _dispatch_payload and _build_message_event_from_cloud walk and map it
// (../shared/docs/platforms-slack-whatsapp.md §3).

// payload is one webhook body.
type payload struct {
	Object string  `json:"object"`
	Entry  []entry `json:"entry"`
}

type entry struct {
	Changes []change `json:"changes"`
}

type change struct {
	Field string      `json:"field"`
	Value changeValue `json:"value"`
}

// changeValue is a "messages" change: the business number it reached, the
// senders' profiles, messages and delivery statuses.
type changeValue struct {
	Metadata struct {
		DisplayPhoneNumber string `json:"display_phone_number"`
		PhoneNumberID      string `json:"phone_number_id"`
	} `json:"metadata"`
	Contacts []struct {
		WaID    string `json:"wa_id"`
		Profile struct {
			Name string `json:"name"`
		} `json:"profile"`
	} `json:"contacts"`
	Messages []message `json:"messages"`
	Statuses []status  `json:"statuses"`
}

// message is one inbound message object.
type message struct {
	From string `json:"from"`
	ID   string `json:"id"`
	// Timestamp is when the user sent it, in Unix seconds.
	Timestamp string `json:"timestamp"`
	Type      string `json:"type"`
	Context   *struct {
		From string `json:"from"`
		ID   string `json:"id"`
	} `json:"context"`
	// Chat marks a group-shaped message; the native adapter drops any
	// truthy value.
	Chat json.RawMessage `json:"chat"`
	Text *struct {
		Body string `json:"body"`
	} `json:"text"`
	Button *struct {
		Text string `json:"text"`
	} `json:"button"`
	Interactive *struct {
		ButtonReply *reply `json:"button_reply"`
		ListReply   *reply `json:"list_reply"`
	} `json:"interactive"`
	Image    *mediaRef `json:"image"`
	Video    *mediaRef `json:"video"`
	Audio    *mediaRef `json:"audio"`
	Voice    *mediaRef `json:"voice"`
	Document *mediaRef `json:"document"`
	Sticker  *mediaRef `json:"sticker"`
}

// reply is an interactive button_reply or list_reply.
type reply struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// mediaRef is an inbound attachment: a media id to fetch from the Graph API.
type mediaRef struct {
	ID       string `json:"id"`
	MimeType string `json:"mime_type"`
	Caption  string `json:"caption"`
	Filename string `json:"filename"`
}

// status is a delivery receipt of a message the business sent.
type status struct {
	Status      string `json:"status"`
	RecipientID string `json:"recipient_id"`
	Callback    string `json:"biz_opaque_callback_data"` // senderMark when the connector sent it
	Errors      []struct {
		Code  int    `json:"code"`
		Title string `json:"title"`
	} `json:"errors"`
}

// Drop reasons of normalization (the gate's are in gate.go).
const (
	dropNotWABA        = "not_whatsapp_business_account"
	dropNonMessage     = "non_message_field"
	dropGroup          = "group_not_supported"
	dropDuplicate      = "duplicate"
	dropTapResolved    = "interactive_tap_resolved"
	dropStatus         = "status_update"
	dropMalformed      = "malformed"
	dropUnclaimed      = "unclaimed"
	dropMediaSkipped   = "media_skipped"
	dropPromptNotOwned = "prompt_not_owned"
)

// errNotObject answers a body that is not one JSON object.
var errNotObject = errors.New("whatsapp: webhook body is not a JSON object")

// decodePayload parses one webhook body.
func decodePayload(body []byte, p *payload) error {
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return errNotObject
	}
	if err := json.Unmarshal(body, p); err != nil {
		return errors.New("whatsapp: malformed webhook body")
	}
	return nil
}

// kind is the message's type as the native adapter reads it: lower-cased,
// "text" when absent.
func (m *message) kind() string {
	if m.Type == "" {
		return "text"
	}
	return strings.ToLower(m.Type)
}

// tap is the interactive reply the message carries, nil for another type.
func (m *message) tap() *reply {
	if m.kind() != "interactive" || m.Interactive == nil {
		return nil
	}
	if r := m.Interactive.ButtonReply; r != nil && (r.ID != "" || r.Title != "") {
		return r
	}
	if r := m.Interactive.ListReply; r != nil {
		return r
	}
	return &reply{}
}

// media is the message's attachment, nil when its type has none.
func (m *message) media() *mediaRef {
	return map[string]*mediaRef{"image": m.Image, "video": m.Video, "audio": m.Audio, "voice": m.Voice,
		"document": m.Document, "sticker": m.Sticker}[m.kind()]
}

// body is the message's text as _BODY_BY_KIND extracts it: the text, a
// template button's text, a tap's title, a media caption; "" for the rest
// (reaction, location, contacts, system, unknown types).
func (m *message) body() string {
	switch k := m.kind(); {
	case k == "text" && m.Text != nil:
		return m.Text.Body
	case k == "button" && m.Button != nil:
		return m.Button.Text
	case k == "interactive":
		if r := m.tap(); r != nil {
			return r.Title
		}
	case m.media() != nil:
		return m.media().Caption
	}
	return ""
}

// messageTypes maps a message type to the MessageEvent type; others are
// text.
var messageTypes = map[string]string{
	"image": contract.MessagePhoto, "sticker": contract.MessagePhoto, "video": contract.MessageVideo,
	"audio": contract.MessageVoice, "voice": contract.MessageVoice, "document": contract.MessageDocument,
}

// messageType is the MessageEvent type of m.
func (m *message) messageType() string {
	if t, ok := messageTypes[m.kind()]; ok {
		return t
	}
	return contract.MessageText
}

// grouped reports whether m carries a chat field Python counts as true.
func (m *message) grouped() bool { return pytext.Truthy(m.Chat) }

// contactNames indexes the change's contacts as wa_id -> profile name,
// both stripped, as _dispatch_payload does.
func (v *changeValue) contactNames() map[string]string {
	names := make(map[string]string, len(v.Contacts))
	for _, c := range v.Contacts {
		if id := strings.TrimSpace(c.WaID); id != "" {
			names[id] = strings.TrimSpace(c.Profile.Name)
		}
	}
	return names
}

// event builds the MessageEvent of m from sender (already gated): the
// source as build_source makes it, the body (a captionless document's
// "[Document: <filename>]"), the reply context.
func (m *message) event(names map[string]string, displayNumber string) contract.Event {
	sender := strings.TrimSpace(m.From)
	name := names[sender]
	src := session.Source{
		Platform: platformName,
		ChatID:   sender,
		ChatName: session.Str(sender),
		ChatType: session.ChatTypeDM,
		UserID:   session.Str(sender),
	}
	if name != "" {
		src.ChatName, src.UserName = session.Str(name), session.Str(name)
	}
	ev := contract.Event{Text: m.body(), MessageType: m.messageType(), MessageID: strings.TrimSpace(m.ID), Source: src}
	if md := m.media(); md != nil && ev.Text == "" && strings.TrimSpace(md.ID) != "" && m.kind() == "document" {
		if fname := strings.TrimSpace(md.Filename); fname != "" {
			ev.Text = "[Document: " + fname + "]"
		}
	}
	if m.Context != nil {
		if id := strings.TrimSpace(m.Context.ID); id != "" {
			ev.ReplyToMessageID = id
			from := strings.TrimSpace(m.Context.From)
			ev.ReplyTo = &contract.ReplyTo{Author: from, IsOwn: from != "" && from == strings.TrimSpace(displayNumber)}
		}
	}
	return ev
}

// Interactive-reply prefixes the native adapter resolves itself
// (_INTERACTIVE_HANDLERS); taps the connector's own prompts carry are
// hp1 tokens (contract.ParsePromptToken).
var nativeTapChoices = map[string][]string{
	"cl:":   nil, // clarify: an index or "other"
	"appr:": {"approve", "deny"},
	"sc:":   {"once", "always", "cancel"},
}

// nativeTap parses a native interactive id ("<prefix><a>:<b>") into its
// prefix, state id and choice; ok is false for any other id.
func nativeTap(id string) (prefix, stateID, choice string, ok bool) {
	for p, choices := range nativeTapChoices {
		rest, found := strings.CutPrefix(id, p)
		if !found {
			continue
		}
		a, b, two := strings.Cut(rest, ":")
		if !two {
			return "", "", "", false
		}
		stateID, choice = a, b
		if p == "sc:" {
			stateID, choice = b, a
		}
		if choices != nil && !slices.Contains(choices, choice) {
			return "", "", "", false
		}
		return p, stateID, choice, true
	}
	return "", "", "", false
}

// taps says which prompts are still waiting for a tap.
type taps interface {
	// native reports whether a native adapter prompt (prefix cl:, appr: or
	// sc:) with this state id is live; the connector sends none, so live
	// ingest answers false and fixtures answer from their context.
	native(prefix, stateID string) bool
	// prompt reports whether the connector's prompt promptID in chat is
	// live (waiting for its one tap).
	prompt(chat, promptID string) bool
}

// classify maps one message, as _build_message_event_from_cloud does:
// a tap of a live prompt first (a native prompt's tap is claimed and
// dropped; the connector's becomes a prompt_response), then the body, the
// group-shape drop, the DM gate, the event. A tap from a sender the strict
// check refuses is claimed and dropped; a stale tap is a text turn with the
// button's title.
func classify(m *message, names map[string]string, displayNumber string, acc *access, t taps) (contract.Event, string) {
	sender := strings.TrimSpace(m.From)
	if r := m.tap(); r != nil {
		if id := strings.TrimSpace(r.ID); id != "" {
			if !acc.tapAllowed(sender) {
				return contract.Event{}, dropTapNotAllowed
			}
			if prefix, stateID, _, ok := nativeTap(id); ok && t.native(prefix, stateID) {
				return contract.Event{}, dropTapResolved
			}
			if promptID, optionID, ok := contract.ParsePromptToken(id); ok && !m.grouped() && t.prompt(sender, promptID) {
				ev := m.event(names, displayNumber)
				ev.Text, ev.MessageType = "/"+optionID, contract.MessageCommand
				ev.PromptResponse = &contract.PromptResponse{PromptID: promptID, OptionID: optionID, Label: r.Title, PromptMessageID: ev.ReplyToMessageID}
				return ev, ""
			}
		}
	}
	if m.grouped() {
		return contract.Event{}, dropGroup
	}
	if drop := acc.intake(sender); drop != "" {
		return contract.Event{}, drop
	}
	return m.event(names, displayNumber), ""
}
