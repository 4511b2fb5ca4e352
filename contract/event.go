package contract

import (
	"cmp"
	"encoding/json"
	"strconv"

	"connector/session"
)

// Message types the gateway understands; any other reads as MessageText.
const (
	MessageText     = "text"
	MessageCommand  = "command"
	MessagePhoto    = "photo"
	MessageVideo    = "video"
	MessageAudio    = "audio"
	MessageVoice    = "voice"
	MessageDocument = "document"
	MessageSticker  = "sticker"
	MessageLocation = "location"
)

// Event is the MessageEvent carried by an inbound frame (hermes-wire.md §6.2).
// Its JSON names are for decoding it (tests and tools that play the
// gateway's part); AppendJSON writes the same ones.
type Event struct {
	Text             string           `json:"text"`
	MessageType      string           `json:"message_type"`
	MessageID        string           `json:"message_id"`
	Source           session.Source   `json:"source"`
	ReplyToMessageID string           `json:"reply_to_message_id"`
	ReplyTo          *ReplyTo         `json:"reply_to"`
	MediaURLs        []string         `json:"media_urls"`
	Media            []Media          `json:"media"`
	Context          []ContextMessage `json:"context"`
	PromptResponse   *PromptResponse  `json:"prompt_response"`
}

// ReplyTo describes the message an event replies to.
type ReplyTo struct {
	Text   string `json:"text"`
	Author string `json:"author"`
	IsOwn  bool   `json:"is_own"`
}

// Media describes one attachment; the gateway matches it to MediaURLs by URL.
type Media struct {
	URL      string `json:"url"`
	MIME     string `json:"mime,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Filename string `json:"filename,omitempty"`
	Caption  string `json:"caption,omitempty"`
}

// ContextMessage is a recent channel message attached for reference.
type ContextMessage struct {
	Text   string        `json:"text"`
	Source ContextAuthor `json:"source"`
}

// ContextAuthor names the author of a ContextMessage.
type ContextAuthor struct {
	UserName string `json:"user_name,omitempty"`
	UserID   string `json:"user_id,omitempty"`
}

// PromptResponse is a button press answering a prompt op.
type PromptResponse struct {
	PromptID        string `json:"prompt_id"`
	OptionID        string `json:"option_id"`
	Label           string `json:"label,omitempty"`
	PromptMessageID string `json:"prompt_message_id,omitempty"`
}

// MarshalJSON encodes the event; see AppendJSON.
func (e Event) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(make([]byte, 0, 512)), nil
}

// AppendJSON appends the event object to dst. text, message_type and source
// are always written (message_type defaults to "text"); the rest only when set.
func (e *Event) AppendJSON(dst []byte) []byte {
	dst = session.AppendJSONField(dst, `{"text":`, e.Text)
	dst = session.AppendJSONField(dst, `,"message_type":`, cmp.Or(e.MessageType, MessageText))
	if e.MessageID != "" {
		dst = session.AppendJSONField(dst, `,"message_id":`, e.MessageID)
	}
	dst = e.Source.AppendJSON(append(dst, `,"source":`...))
	if e.ReplyToMessageID != "" {
		dst = session.AppendJSONField(dst, `,"reply_to_message_id":`, e.ReplyToMessageID)
	}
	if e.ReplyTo != nil {
		dst = session.AppendJSONField(dst, `,"reply_to":{"text":`, e.ReplyTo.Text)
		dst = session.AppendJSONField(dst, `,"author":`, e.ReplyTo.Author)
		dst = append(strconv.AppendBool(append(dst, `,"is_own":`...), e.ReplyTo.IsOwn), '}')
	}
	if len(e.MediaURLs) > 0 {
		dst = append(dst, `,"media_urls":[`...)
		for i, u := range e.MediaURLs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = session.AppendJSONString(dst, u)
		}
		dst = append(dst, ']')
	}
	dst = appendMarshaled(dst, `,"media":`, e.Media, len(e.Media) > 0)
	dst = appendMarshaled(dst, `,"context":`, e.Context, len(e.Context) > 0)
	dst = appendMarshaled(dst, `,"prompt_response":`, e.PromptResponse, e.PromptResponse != nil)
	return append(dst, '}')
}

// appendMarshaled appends key and the JSON of v when present is true. The
// types passed here marshal without error by construction.
func appendMarshaled(dst []byte, key string, v any, present bool) []byte {
	if !present {
		return dst
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst
	}
	return append(append(dst, key...), b...)
}

// Forward is the body of a passthrough_forward frame: a platform request the
// connector verified and sanitized (credentials stripped) for a gateway's
// passthrough handler.
type Forward struct {
	Platform string      `json:"platform"`
	BotID    string      `json:"botId"`
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	Headers  [][2]string `json:"headers"`
	// BodyB64 is the sanitized body, standard base64 with padding.
	BodyB64 string  `json:"bodyB64"`
	Profile *string `json:"profile"`
}
