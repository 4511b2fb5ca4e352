package contract

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Outbound op names (hermes-wire.md §7.3). A platform advertises the ones its
// egress implements in its descriptor's supported_ops.
const (
	OpSend         = "send"
	OpEdit         = "edit"
	OpTyping       = "typing"
	OpFollowUp     = "follow_up"
	OpGetChatInfo  = "get_chat_info"
	OpSendMedia    = "send_media"
	OpPrompt       = "prompt"
	OpReact        = "react"
	OpThreadCreate = "thread_create"
	OpThreadRename = "thread_rename"
	OpDelete       = "delete"
	OpDraft        = "draft"
	OpTaskCard     = "task_card"
	OpTaskCardStop = "task_card_stop"
)

// Ops lists every op name of the contract.
var Ops = []string{
	OpSend, OpEdit, OpTyping, OpFollowUp, OpGetChatInfo, OpSendMedia, OpPrompt,
	OpReact, OpThreadCreate, OpThreadRename, OpDelete, OpDraft, OpTaskCard, OpTaskCardStop,
}

// AddressesChat reports whether op acts in the chat its action's chat_id
// names. Every op does but follow_up, which names a session (session_key)
// and its capability (kind); this is the one place that says so.
func AddressesChat(op string) bool { return op != OpFollowUp }

// MissingTarget returns bad_request when a, an op of the contract, does not
// name what it acts on: a follow_up its session_key, any other op its
// chat_id. An op outside the contract is not checked here (the platform
// answers unsupported_op).
func (a *Action) MissingTarget() (Result, bool) {
	switch {
	case a.Op == OpFollowUp && a.SessionKey == "":
		return Failed(CodeBadRequest, "follow_up needs a session_key"), true
	case AddressesChat(a.Op) && a.ChatID == "" && slices.Contains(Ops, a.Op):
		return Failed(CodeBadRequest, a.Op+" needs a chat_id"), true
	}
	return Result{}, false
}

// Action is the op and its fields of an outbound frame. Fields an op does not
// use are empty; unknown fields are ignored.
type Action struct {
	Op      string `json:"op"`
	ChatID  ID     `json:"chat_id"`
	Content string `json:"content"`
	// HasContent reports, for typing, whether content was sent: absent
	// asks for the platform's default indicator, "" clears a Slack status.
	HasContent bool     `json:"-"`
	ReplyTo    ID       `json:"reply_to"`
	Metadata   Metadata `json:"metadata"`

	// edit, react, delete, thread_rename (the thread id)
	MessageID ID `json:"message_id"`

	// follow_up
	SessionKey string `json:"session_key"`
	Kind       string `json:"kind"`

	// react
	Emoji  string `json:"emoji"`
	Remove bool   `json:"remove"`

	// send_media
	MediaKind string `json:"media_kind"`
	SourceURL string `json:"source_url"`
	Filename  string `json:"filename"`

	// prompt (prompt_kind and timeout_s are the gateway's own)
	PromptID string         `json:"prompt_id"`
	Options  []PromptOption `json:"options"`

	// thread_create, thread_rename
	ThreadName             string  `json:"thread_name"`
	OnlyIfConnectorCreated bool    `json:"only_if_connector_created"`
	OnlyIfCurrentName      *string `json:"only_if_current_name"`

	// draft
	DraftID int64 `json:"draft_id"`
	Final   bool  `json:"final"`
}

// PromptOption is one button of a prompt.
type PromptOption struct {
	ID    string `json:"id"`
	Label string `json:"label"`
	Style string `json:"style,omitempty"`
}

// Metadata holds the metadata keys the connector uses (hermes-wire.md §7.4);
// the gateway may send more, which are ignored.
type Metadata struct {
	ScopeID          ID     `json:"scope_id"`
	UserID           ID     `json:"user_id"`
	Profile          string `json:"profile"`
	ThreadID         ID     `json:"thread_id"`
	ThreadTS         ID     `json:"thread_ts"`
	ReplyToMessageID ID     `json:"reply_to_message_id"`
	// MessageID is the message of the turn the action belongs to (the
	// gateway keys a turn's draft stream by it, else by
	// reply_to_message_id).
	MessageID ID `json:"message_id"`
}

// Turn is the turn an action belongs to, as the gateway keys a draft
// stream: MessageID, else ReplyToMessageID; "" when it names none.
func (m Metadata) Turn() string {
	return string(cmp.Or(m.MessageID, m.ReplyToMessageID))
}

// UnmarshalJSON tolerates a null or non-object metadata (read as empty).
func (m *Metadata) UnmarshalJSON(data []byte) error {
	*m = Metadata{}
	if len(data) == 0 || data[0] != '{' {
		return nil
	}
	type plain Metadata
	return json.Unmarshal(data, (*plain)(m))
}

// DecodeAction parses the action object of an outbound frame.
func DecodeAction(raw json.RawMessage) (Action, error) {
	var a Action
	if len(raw) == 0 || string(raw) == "null" {
		return a, errors.New("outbound has no action")
	}
	if raw[0] != '{' {
		return a, errors.New("outbound action is not an object")
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return Action{}, fmt.Errorf("decode action: %w", err)
	}
	if a.Op == "" {
		return a, errors.New("outbound action has no op")
	}
	if a.Op == OpTyping {
		var probe struct {
			Content *string `json:"content"`
		}
		_ = json.Unmarshal(raw, &probe) // it decoded above
		a.HasContent = probe.Content != nil
	}
	return a, nil
}
