// Package session holds the SessionSource that rides every inbound event and
// the session-key function that Hermes gateways key their conversations by.
//
// The connector's most important correctness duty is to fill a Source so that
// Key gives exactly the key the gateway's own build_session_key() computes from
// it; the fixtures under testdata/ were produced by running the real Python
// code and are the oracle. Source marshals to the exact wire dict of the
// gateway's SessionSource.to_dict() (same key order, the eight always-present
// keys emitted even when null, the optional ones only when set) plus the two
// connector-only booleans is_bot and message_is_edit, which current gateways
// ignore.
package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"connector/internal/pytext"
)

// Nullable is a string that may be JSON null. The zero value is null; an empty
// but valid string marshals as "". Session keys treat null and "" alike.
type Nullable struct {
	Value string
	Valid bool
}

// Str returns a valid Nullable holding s (which may be empty).
func Str(s string) Nullable { return Nullable{Value: s, Valid: true} }

// StrOrNull returns null for "" and a valid Nullable otherwise.
func StrOrNull(s string) Nullable { return Nullable{Value: s, Valid: s != ""} }

// Truthy reports whether Python would treat the value as true: set and non-empty.
func (n Nullable) Truthy() bool { return n.Valid && n.Value != "" }

// Source is the gateway's SessionSource as it travels on the wire.
//
// The always-present fields are the first eight; everything else is omitted
// from JSON when empty. ScopeID is written as both scope_id and guild_id
// (the gateway reads scope_id; older readers read guild_id).
type Source struct {
	Platform  string
	ChatID    string
	ChatName  Nullable
	ChatType  string
	UserID    Nullable
	UserName  Nullable
	ThreadID  Nullable
	ChatTopic Nullable

	UserIDAlt             string
	ChatIDAlt             string
	ScopeID               string
	ParentChatID          string
	MessageID             string
	Profile               string
	AutoThreadCreated     bool
	AutoThreadInitialName string
	ProspectiveThreadID   string

	// IsBot and MessageIsEdit are connector additions: always written, ignored
	// by current gateways (hermes-wire.md §12), kept for forward compatibility.
	IsBot         bool
	MessageIsEdit bool
}

// ChatTypeDM and the other chat types are the values native adapters emit.
const (
	ChatTypeDM      = "dm"
	ChatTypeGroup   = "group"
	ChatTypeChannel = "channel"
	ChatTypeThread  = "thread"
	ChatTypeForum   = "forum"
)

// MarshalJSON writes the to_dict() layout. It never fails.
func (s Source) MarshalJSON() ([]byte, error) {
	return s.AppendJSON(make([]byte, 0, 256)), nil
}

// AppendJSON appends the JSON object of s to dst and returns the extended
// slice; it is the allocation-free form of MarshalJSON.
func (s *Source) AppendJSON(dst []byte) []byte {
	dst = AppendJSONField(dst, `{"platform":`, s.Platform)
	dst = AppendJSONField(dst, `,"chat_id":`, s.ChatID)
	dst = appendNullable(dst, `,"chat_name":`, s.ChatName)
	dst = AppendJSONField(dst, `,"chat_type":`, s.ChatType)
	dst = appendNullable(dst, `,"user_id":`, s.UserID)
	dst = appendNullable(dst, `,"user_name":`, s.UserName)
	dst = appendNullable(dst, `,"thread_id":`, s.ThreadID)
	dst = appendNullable(dst, `,"chat_topic":`, s.ChatTopic)
	dst = appendOptional(dst, `,"user_id_alt":`, s.UserIDAlt)
	dst = appendOptional(dst, `,"chat_id_alt":`, s.ChatIDAlt)
	dst = appendOptional(dst, `,"scope_id":`, s.ScopeID)
	dst = appendOptional(dst, `,"guild_id":`, s.ScopeID)
	dst = appendOptional(dst, `,"parent_chat_id":`, s.ParentChatID)
	dst = appendOptional(dst, `,"message_id":`, s.MessageID)
	dst = appendOptional(dst, `,"profile":`, s.Profile)
	if s.AutoThreadCreated {
		dst = append(dst, `,"auto_thread_created":true`...)
	}
	dst = appendOptional(dst, `,"auto_thread_initial_name":`, s.AutoThreadInitialName)
	dst = appendOptional(dst, `,"prospective_thread_id":`, s.ProspectiveThreadID)
	dst = strconv.AppendBool(append(dst, `,"is_bot":`...), s.IsBot)
	dst = strconv.AppendBool(append(dst, `,"message_is_edit":`...), s.MessageIsEdit)
	return append(dst, '}')
}

// AppendJSONField appends key, the JSON text before a member's value (such
// as `,"chat_id":`), and v as a JSON string: a string member of a
// hand-encoded frame.
func AppendJSONField(dst []byte, key, v string) []byte {
	return AppendJSONString(append(dst, key...), v)
}

// appendOptional is AppendJSONField when v is set.
func appendOptional(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	return AppendJSONField(dst, key, v)
}

// appendNullable appends key and n, null when it is not valid.
func appendNullable(dst []byte, key string, n Nullable) []byte {
	dst = append(dst, key...)
	if !n.Valid {
		return append(dst, "null"...)
	}
	return AppendJSONString(dst, n.Value)
}

// AppendJSONString appends s to dst as a JSON string literal. Invalid UTF-8
// becomes U+FFFD, as encoding/json does; HTML characters are not escaped
// (the gateway is not a browser). Other packages that hand-encode hot-path
// frames use it so all of them escape alike.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break some JavaScript readers.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// UnmarshalJSON reads a wire dict with the tolerance of the gateway's
// SessionSource.from_dict(): chat_id goes through str() (a number becomes its
// decimal text, null becomes "None"), chat_type defaults to "dm", scope_id
// falls back to guild_id, other id fields accept numbers, and unknown keys are
// ignored. Falsy values (0, false, "") of the optional fields read as unset,
// matching how build_session_key() treats them.
func (s *Source) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("session source: %w", err)
	}
	if raw == nil {
		return errors.New("session source: not an object")
	}
	*s = Source{ChatType: ChatTypeDM}
	var err error
	field := func(key string) Nullable {
		v, ok := raw[key]
		if !ok || err != nil {
			return Nullable{}
		}
		var n Nullable
		n, err = looseString(key, v)
		return n
	}
	plain := func(key string) string {
		n := field(key)
		if !n.Truthy() {
			return ""
		}
		return n.Value
	}

	s.Platform = plain("platform")
	if v, ok := raw["chat_id"]; ok {
		s.ChatID, err = pythonStr(v)
	}
	s.ChatName = field("chat_name")
	if _, ok := raw["chat_type"]; ok {
		s.ChatType = field("chat_type").Value
	}
	s.UserID = field("user_id")
	s.UserName = field("user_name")
	s.ThreadID = field("thread_id")
	s.ChatTopic = field("chat_topic")
	s.UserIDAlt = plain("user_id_alt")
	s.ChatIDAlt = plain("chat_id_alt")
	if sc, ok := raw["scope_id"]; ok && string(sc) != "null" {
		s.ScopeID = plain("scope_id")
	} else {
		s.ScopeID = plain("guild_id")
	}
	s.ParentChatID = plain("parent_chat_id")
	s.MessageID = plain("message_id")
	s.Profile = plain("profile")
	s.AutoThreadInitialName = plain("auto_thread_initial_name")
	s.ProspectiveThreadID = plain("prospective_thread_id")
	s.AutoThreadCreated = pytext.Truthy(raw["auto_thread_created"])
	s.IsBot = pytext.Truthy(raw["is_bot"])
	s.MessageIsEdit = pytext.Truthy(raw["message_is_edit"])
	return err
}

// looseString reads a JSON string, number, bool or null as text. Numbers keep
// their JSON spelling; 0 and false read as null (Python falsy).
func looseString(key string, v json.RawMessage) (Nullable, error) {
	if len(v) == 0 {
		return Nullable{}, nil
	}
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return Nullable{}, fmt.Errorf("session source: %s: %w", key, err)
		}
		return Str(s), nil
	case 'n', 'f':
		return Nullable{}, nil
	case 't':
		return Str("True"), nil
	case '{', '[':
		return Nullable{}, fmt.Errorf("session source: %s: want a string, got %c", key, v[0])
	default:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return Nullable{}, fmt.Errorf("session source: %s: %w", key, err)
		}
		if f == 0 {
			return Nullable{}, nil
		}
		return Str(string(v)), nil
	}
}

// pythonStr is str(value) for the chat_id field: null is "None", false
// "False", numbers keep their spelling; strings, true and non-scalars read
// as looseString reads them.
func pythonStr(v json.RawMessage) (string, error) {
	switch {
	case len(v) == 0:
		return "", nil
	case v[0] == 'n':
		return "None", nil
	case v[0] == 'f':
		return "False", nil
	case v[0] == '"' || v[0] == 't' || v[0] == '{' || v[0] == '[':
		n, err := looseString("chat_id", v)
		return n.Value, err
	}
	return string(v), nil
}
