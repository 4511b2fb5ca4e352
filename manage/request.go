package manage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"connector/internal/textsplit"
	"connector/registry"
	"connector/registry/change"
)

// Request is the body of any management route; each route reads the
// fields it needs. Ids may be JSON strings or integers. Unknown fields
// (such as a body-asserted instanceId) are ignored.
type Request struct {
	// Platform is "discord" or "telegram" ("" on /manage/link: any).
	Platform string
	// TTLSeconds is a link code's lifetime (0: registry.DefaultLinkTTL).
	TTLSeconds int
	// GuildID and ChannelID name a scope (a Telegram chat: ChannelID).
	GuildID, ChannelID string
	// Principal is owner-only, allow-list or any; Allow its allow-list.
	Principal string
	Allow     []string
	// UserID is a platform user (dm-default).
	UserID string
}

// wireRequest is Request as it is read.
type wireRequest struct {
	Platform   string   `json:"platform"`
	TTLSeconds int      `json:"ttlSeconds"`
	GuildID    flexID   `json:"guildId"`
	ChannelID  flexID   `json:"channelId"`
	Principal  string   `json:"principal"`
	Allow      []flexID `json:"allow"`
	UserID     flexID   `json:"userId"`
}

// maxField bounds a string field.
const maxField = 128

// ParseRequest reads a management request body: empty, or one JSON
// object. It bounds every field.
func ParseRequest(body []byte) (*Request, error) {
	var w wireRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := change.Decode(bytes.NewReader(body), &w, false); err != nil {
			return nil, err
		}
	}
	if w.TTLSeconds < 0 || w.TTLSeconds > int(registry.MaxLinkTTL.Seconds()) {
		return nil, change.Invalid("ttlSeconds %d: want 0 to %d", w.TTLSeconds, int(registry.MaxLinkTTL.Seconds()))
	}
	if len(w.Allow) > registry.MaxAllowList {
		return nil, change.Invalid("allow: more than %d users", registry.MaxAllowList)
	}
	r := &Request{Platform: w.Platform, TTLSeconds: w.TTLSeconds, GuildID: string(w.GuildID), ChannelID: string(w.ChannelID),
		Principal: w.Principal, UserID: string(w.UserID)}
	for _, a := range w.Allow {
		r.Allow = append(r.Allow, string(a))
	}
	for name, v := range map[string]string{"platform": r.Platform, "guildId": r.GuildID, "channelId": r.ChannelID, "principal": r.Principal, "userId": r.UserID} {
		if len(v) > maxField {
			return nil, change.Invalid("%s longer than %d bytes", name, maxField)
		}
	}
	return r, nil
}

// flexID is an id sent as a JSON string or integer.
type flexID string

func (f *flexID) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if len(s) > maxField {
			return fmt.Errorf("id longer than %d bytes", maxField)
		}
		*f = flexID(s)
		return nil
	}
	if string(b) == "null" {
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		if len(b) > 32 {
			b = append([]byte(textsplit.Truncate(string(b), 32)), "…"...)
		}
		return fmt.Errorf("id %s: want a string or an integer", b)
	}
	*f = flexID(strconv.FormatInt(n, 10))
	return nil
}
