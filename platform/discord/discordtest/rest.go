package discordtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// serveREST routes /api/v9/... like Discord.
func (s *Server) serveREST(w http.ResponseWriter, r *http.Request) {
	body, files, err := readRequestBody(r)
	if err != nil {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body")
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body, Files: files})
	s.notifyLocked()
	hook := s.hook
	s.mu.Unlock()
	if hook != nil && hook(w, r, body) {
		return
	}
	segs := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/api/v9/"), "/"), "/")
	public := segs[0] == "webhooks" || segs[0] == "interactions" || segs[0] == "gateway"
	if !public && r.Header.Get("Authorization") != "Bot "+s.opts.Token {
		apiError(w, http.StatusUnauthorized, 0, "401: Unauthorized")
		return
	}
	route := r.Method + " " + segs[0]
	switch {
	case route == "GET gateway" && len(segs) == 1:
		writeJSON(w, http.StatusOK, map[string]string{"url": s.GatewayURL})
	case route == "GET gateway" && len(segs) == 2 && segs[1] == "bot":
		writeJSON(w, http.StatusOK, map[string]any{"url": s.GatewayURL, "shards": 1,
			"session_start_limit": map[string]int{"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}})
	case route == "GET channels" && len(segs) == 2:
		s.getChannel(w, segs[1])
	case route == "GET guilds" && len(segs) == 2:
		s.getGuild(w, segs[1])
	case route == "POST channels" && len(segs) == 3 && segs[2] == "messages":
		s.postMessage(w, segs[1], body, files)
	case route == "PATCH channels" && len(segs) == 4 && segs[2] == "messages":
		s.patchMessage(w, segs[1], segs[3], body)
	case route == "POST channels" && len(segs) == 3 && segs[2] == "typing":
		if !s.hasChannel(segs[1]) {
			apiError(w, http.StatusNotFound, 10003, "Unknown Channel")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case (route == "PUT channels" || route == "DELETE channels") && len(segs) == 7 && segs[2] == "messages" && segs[4] == "reactions" && segs[6] == "@me":
		s.ownReaction(w, r.Method == http.MethodPut, segs[1], segs[3], segs[5])
	case route == "DELETE channels" && len(segs) == 4 && segs[2] == "messages":
		s.deleteMessage(w, segs[1], segs[3])
	case route == "POST channels" && len(segs) == 3 && segs[2] == "threads":
		s.startChannelThread(w, segs[1], body)
	case route == "PATCH channels" && len(segs) == 2:
		s.patchChannel(w, segs[1], body)
	case route == "POST channels" && len(segs) == 5 && segs[2] == "messages" && segs[4] == "threads":
		s.startThread(w, segs[1], segs[3], body)
	case route == "POST webhooks" && len(segs) == 3:
		s.followUp(w, segs[2], body)
	case route == "POST interactions" && len(segs) == 4 && segs[3] == "callback":
		w.WriteHeader(http.StatusNoContent)
	case (route == "GET applications" || route == "PUT applications") && len(segs) == 3 && segs[2] == "commands":
		s.commandsRoute(w, r.Method, "", body)
	case (route == "GET applications" || route == "PUT applications") && len(segs) == 5 && segs[2] == "guilds" && segs[4] == "commands":
		s.commandsRoute(w, r.Method, segs[3], body)
	default:
		apiError(w, http.StatusNotFound, 0, "404: Not Found")
	}
}

func (s *Server) hasChannel(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.channels[id]
	return ok
}

func (s *Server) getChannel(w http.ResponseWriter, id string) {
	s.mu.Lock()
	c, ok := s.channels[id]
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, 10003, "Unknown Channel")
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) getGuild(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.guilds {
		if g.ID == id {
			writeJSON(w, http.StatusOK, map[string]string{"id": g.ID, "name": g.Name})
			return
		}
	}
	apiError(w, http.StatusNotFound, 10004, "Unknown Guild")
}

// messageJSON is a message object as Discord returns it.
func (s *Server) messageJSON(m *Message) map[string]any {
	out := map[string]any{
		"id": m.ID, "channel_id": m.ChannelID, "content": m.Content, "type": 0,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "tts": false, "mentions": []any{},
		"author": map[string]any{"id": s.opts.BotID, "username": s.opts.BotName, "bot": true, "discriminator": "0"},
		"embeds": []any{}, "attachments": []any{}, "pinned": false, "mention_everyone": false,
		"edited_timestamp": nil, "flags": 0, "components": []Component{},
	}
	if len(m.Components) > 0 {
		out["components"] = m.Components
	}
	if len(m.Attachments) > 0 {
		list := make([]any, len(m.Attachments))
		for i, a := range m.Attachments {
			list[i] = map[string]any{"id": s.opts.BotID + "0" + strconv.Itoa(i), "filename": a.Filename, "size": a.Size,
				"url": "https://cdn.discordapp.com/attachments/" + m.ChannelID + "/" + m.ID + "/" + a.Filename, "content_type": a.ContentType}
		}
		out["attachments"] = list
	}
	if m.ReplyTo != "" {
		out["type"] = 19
		out["message_reference"] = map[string]any{"message_id": m.ReplyTo, "channel_id": m.ChannelID}
	}
	return out
}

type messageBody struct {
	Content   *string `json:"content"`
	Reference *struct {
		MessageID string `json:"message_id"`
	} `json:"message_reference"`
	Components []Component `json:"components"`
}

// checkComponents validates message components as Discord does: at most 5
// action rows (type 1) of 1 to 5 buttons (type 2); a button of style 1-4
// needs a custom_id of 1 to 100 characters, unique in the message, and
// every button a label of at most 80.
func checkComponents(rows []Component) string {
	if len(rows) > 5 {
		return "components: must be 5 or fewer in length"
	}
	ids := map[string]bool{}
	for _, row := range rows {
		if row.Type != 1 || len(row.Components) == 0 || len(row.Components) > 5 {
			return "components: an action row holds 1 to 5 components"
		}
		for _, b := range row.Components {
			switch {
			case b.Type != 2:
				return "components: only buttons are supported by this fake"
			case b.Style < 1 || b.Style > 4:
				return "components: button style must be 1 to 4"
			case b.CustomID == "" || len([]rune(b.CustomID)) > 100:
				return "components: custom_id must be 1 to 100 in length"
			case ids[b.CustomID]:
				return "components: custom_id must be unique"
			case len([]rune(b.Label)) > 80:
				return "components: label must be 80 or fewer in length"
			}
			ids[b.CustomID] = true
		}
	}
	return ""
}

// blank reports content Discord refuses as empty: it holds only whitespace
// (a lone "\n" is refused with 50006, e.g. NITKC-DEV/Kisarazu-Multi-Manager#32).
func blank(content string) bool { return strings.TrimSpace(content) == "" }

func (s *Server) postMessage(w http.ResponseWriter, channelID string, body []byte, files []Attachment) {
	var b messageBody
	if err := json.Unmarshal(body, &b); err != nil || (len(files) == 0 && (b.Content == nil || blank(*b.Content))) {
		apiError(w, http.StatusBadRequest, 50006, "Cannot send an empty message")
		return
	}
	if b.Content != nil && len([]rune(*b.Content)) > 2000 {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body: content must be 2000 or fewer in length")
		return
	}
	if msg := checkComponents(b.Components); msg != "" {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body: "+msg)
		return
	}
	s.mu.Lock()
	if _, ok := s.channels[channelID]; !ok {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, 10003, "Unknown Channel")
		return
	}
	m := &Message{ID: s.newIDLocked(), ChannelID: channelID, Attachments: files, Components: b.Components}
	if b.Content != nil {
		m.Content = *b.Content
	}
	if b.Reference != nil {
		m.ReplyTo = b.Reference.MessageID
	}
	s.messages[m.ID] = m
	s.order = append(s.order, m.ID)
	s.notifyLocked()
	out := s.messageJSON(m)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) patchMessage(w http.ResponseWriter, channelID, msgID string, body []byte) {
	var b messageBody
	if err := json.Unmarshal(body, &b); err != nil {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body")
		return
	}
	s.mu.Lock()
	m, ok := s.messages[msgID]
	if !ok || m.ChannelID != channelID {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, 10008, "Unknown Message")
		return
	}
	if b.Content != nil {
		m.Content = *b.Content
	}
	m.Edited = true
	s.notifyLocked()
	out := s.messageJSON(m)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) startThread(w http.ResponseWriter, channelID, msgID string, body []byte) {
	var b struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(body, &b)
	s.mu.Lock()
	parent, ok := s.channels[channelID]
	if !ok {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, 10003, "Unknown Channel")
		return
	}
	if parent.Type != 0 && parent.Type != 5 {
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, 50024, "Cannot execute action on this channel type")
		return
	}
	th := Channel{ID: msgID, Type: 11, GuildID: parent.GuildID, Name: b.Name, ParentID: channelID, OwnerID: s.opts.BotID}
	s.channels[th.ID] = th
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, th)
}

func (s *Server) followUp(w http.ResponseWriter, token string, body []byte) {
	var b messageBody
	if err := json.Unmarshal(body, &b); err != nil || b.Content == nil || blank(*b.Content) {
		apiError(w, http.StatusBadRequest, 50006, "Cannot send an empty message")
		return
	}
	s.mu.Lock()
	channel, ok := s.tokens[token]
	if !ok {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, 10015, "Unknown Webhook")
		return
	}
	m := &Message{ID: s.newIDLocked(), ChannelID: channel, Content: *b.Content}
	s.messages[m.ID] = m
	s.order = append(s.order, m.ID)
	s.notifyLocked()
	out := s.messageJSON(m)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// commandsRoute answers GET and PUT (bulk overwrite) of the global commands
// (guildID "") or of a guild's, as Discord does: every command comes back
// with its id (kept for a name that was already registered), application_id,
// version, type (1, chat input, by default), default_member_permissions and
// nsfw; a global one with integration_types and contexts, a guild's with
// its guild_id and without those global-only fields and dm_permission.
func (s *Server) commandsRoute(w http.ResponseWriter, method, guildID string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if guildID != "" && !s.hasGuildLocked(guildID) {
		apiError(w, http.StatusForbidden, 50001, "Missing Access")
		return
	}
	have := s.commands
	if guildID != "" {
		have = s.guildCmds[guildID]
	}
	if method == http.MethodGet {
		if have == nil {
			have = []map[string]any{}
		}
		writeJSON(w, http.StatusOK, have)
		return
	}
	var cmds []map[string]any
	if err := json.Unmarshal(body, &cmds); err != nil {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body")
		return
	}
	if len(cmds) > 100 {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body: must be 100 or fewer in length")
		return
	}
	ids := make(map[string]any, len(have))
	for _, c := range have {
		ids[fmt.Sprint(c["name"])] = c["id"]
	}
	for _, c := range cmds {
		if id, ok := ids[fmt.Sprint(c["name"])]; ok {
			c["id"] = id
		} else {
			c["id"] = s.newIDLocked()
		}
		c["application_id"] = s.opts.AppID
		c["version"] = s.newIDLocked()
		if _, ok := c["type"]; !ok {
			c["type"] = 1
		}
		if _, ok := c["default_member_permissions"]; !ok {
			c["default_member_permissions"] = nil
		}
		if _, ok := c["nsfw"]; !ok {
			c["nsfw"] = false
		}
		if guildID != "" {
			c["guild_id"] = guildID
			delete(c, "dm_permission")
			delete(c, "contexts")
			delete(c, "integration_types")
			continue
		}
		if _, ok := c["integration_types"]; !ok {
			c["integration_types"] = []int{0}
		}
		if _, ok := c["contexts"]; !ok {
			c["contexts"] = nil
		}
	}
	if guildID != "" {
		s.guildCmds[guildID] = cmds
	} else {
		s.commands = cmds
	}
	s.notifyLocked()
	writeJSON(w, http.StatusOK, cmds)
}

func (s *Server) hasGuildLocked(id string) bool {
	for _, g := range s.guilds {
		if g.ID == id {
			return true
		}
	}
	return false
}

// ownReaction adds (add) or removes the bot's reaction emoji on a message:
// 204, 10008 Unknown Message, or 10014 Unknown Emoji for an emoji that is
// neither non-ASCII (Unicode) nor name:id (custom).
func (s *Server) ownReaction(w http.ResponseWriter, add bool, channelID, msgID, emoji string) {
	name, id, custom := strings.Cut(emoji, ":")
	unicode := emoji != "" && strings.IndexFunc(emoji, func(r rune) bool { return r > 0x7f }) >= 0
	if !unicode && (!custom || name == "" || id == "") {
		apiError(w, http.StatusBadRequest, 10014, "Unknown Emoji")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[msgID]
	if !ok || m.ChannelID != channelID {
		apiError(w, http.StatusNotFound, 10008, "Unknown Message")
		return
	}
	var kept []string // a new slice: copies handed out by Messages keep theirs
	for _, e := range m.Reactions {
		if e != emoji {
			kept = append(kept, e)
		}
	}
	m.Reactions = kept
	if add {
		m.Reactions = append(m.Reactions, emoji)
	}
	s.notifyLocked()
	w.WriteHeader(http.StatusNoContent)
}

// deleteMessage deletes a message: 204 or 10008 Unknown Message.
func (s *Server) deleteMessage(w http.ResponseWriter, channelID, msgID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[msgID]
	if !ok || m.ChannelID != channelID {
		apiError(w, http.StatusNotFound, 10008, "Unknown Message")
		return
	}
	delete(s.messages, msgID)
	s.notifyLocked()
	w.WriteHeader(http.StatusNoContent)
}

// startChannelThread creates a thread without a starter message (POST
// /channels/{id}/threads): type 11 (public) or 12 (private), in a text
// channel, with a name of 1 to 100 characters.
func (s *Server) startChannelThread(w http.ResponseWriter, channelID string, body []byte) {
	var b struct {
		Name string `json:"name"`
		Type int    `json:"type"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Name == "" || len([]rune(b.Name)) > 100 {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body: name must be between 1 and 100 in length")
		return
	}
	if b.Type == 0 {
		b.Type = 12 // Discord's default is a private thread
	}
	s.mu.Lock()
	parent, ok := s.channels[channelID]
	if !ok {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, 10003, "Unknown Channel")
		return
	}
	if parent.Type != 0 && parent.Type != 5 || (b.Type != 11 && b.Type != 12) {
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, 50024, "Cannot execute action on this channel type")
		return
	}
	th := Channel{ID: s.newIDLocked(), Type: b.Type, GuildID: parent.GuildID, Name: b.Name, ParentID: channelID, OwnerID: s.opts.BotID}
	s.channels[th.ID] = th
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, th)
}

// patchChannel renames a channel or thread (PATCH /channels/{id} with a
// name of 1 to 100 characters) and answers the channel.
func (s *Server) patchChannel(w http.ResponseWriter, id string, body []byte) {
	var b struct {
		Name *string `json:"name"`
	}
	if err := json.Unmarshal(body, &b); err != nil || (b.Name != nil && (*b.Name == "" || len([]rune(*b.Name)) > 100)) {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body: name must be between 1 and 100 in length")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[id]
	if !ok {
		apiError(w, http.StatusNotFound, 10003, "Unknown Channel")
		return
	}
	if b.Name != nil {
		c.Name = *b.Name
		s.channels[id] = c
	}
	s.notifyLocked()
	writeJSON(w, http.StatusOK, c)
}

// Channel returns channel or thread id as the fake holds it.
func (s *Server) Channel(id string) (Channel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[id]
	return c, ok
}
