// Package telegramtest is a fake Telegram Bot API server for tests and load
// tools: it speaks the real wire format (POST /bot<token>/<method> with
// multipart/form-data, answers {"ok":…,"result":…} or {"ok":false,
// "error_code":…,"description":…,"parameters":{"retry_after":…}}), serves
// getUpdates long polls from a queue, validates the text of sendMessage,
// editMessageText and sendMessageDraft (MarkdownV2 parsed by
// ParseMarkdownV2, 4,096 visible code points, no message_thread_id 1),
// records every call, and fails calls on request.
package telegramtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connector/internal/clock"
)

// Server is a fake Bot API server on loopback.
type Server struct {
	// URL is the base URL to give the client (bot.WithServerURL).
	URL string
	// BotID and Username are what getMe answers.
	BotID    int64
	Username string

	token string
	srv   *httptest.Server

	mu        sync.Mutex
	clock     clock.Clock   // stamps Call.At
	changed   chan struct{} // closed and replaced on every recorded call or queued update
	calls     []Call
	updates   []queued
	onAnswer  func(updates int) // see OnAnswer
	failures  map[string][]Failure
	holds     map[string]chan struct{} // see Hold
	messages  map[msgKey]string
	markups   map[msgKey]json.RawMessage
	reactions map[msgKey][]string
	forums    map[int64]bool
	topics    map[msgKey]string
	drafts    map[draftKey]string // visible text of each chat's (and topic's) draft
	chats     map[int64]map[string]any
	nextID    int
	webhook   Webhook
	files     map[string]hostedFile // by file_id (AddFile)
}

// Call is one recorded API call.
type Call struct {
	Method string
	// Form holds the form fields as sent (structured ones as JSON text).
	Form map[string]string
	// Files holds the uploaded file fields (sendPhoto's photo, …), hashed
	// as they streamed in, never kept whole.
	Files map[string]File
	// At is when the call arrived, on the server's clock (SetClock).
	At time.Time
}

// Failure is a scripted error answer.
type Failure struct {
	// Code is error_code and the HTTP status (400, 403, 429, …).
	Code int
	// Description is Telegram's text, e.g. "Bad Request: chat not found".
	Description string
	// RetryAfter is parameters.retry_after, in seconds (429).
	RetryAfter int
	// MigrateToChatID is parameters.migrate_to_chat_id (400).
	MigrateToChatID int64
}

// Webhook is the last setWebhook registration, as the form fields came.
type Webhook struct {
	// URL is the url parameter.
	URL string
	// SecretToken is the secret_token parameter.
	SecretToken string
	// AllowedUpdates is the allowed_updates parameter (a JSON array).
	AllowedUpdates string
	// MaxConnections is the max_connections parameter.
	MaxConnections string
}

type queued struct {
	id     int64
	raw    json.RawMessage
	handed bool // carried by an answer: an offset past it confirms it
}

type msgKey struct {
	chat int64
	id   int
}

type draftKey struct {
	chat   int64
	thread int
	id     int64
}

// New starts a fake for the bot token (whose numeric prefix is BotID) and
// closes it when the test ends.
func New(t cleaner, token string) *Server {
	s := NewServer(token)
	t.Cleanup(s.Close)
	return s
}

// cleaner is the part of testing.TB New needs.
type cleaner interface{ Cleanup(func()) }

// NewServer starts a fake for the bot token; Close stops it.
func NewServer(token string) *Server {
	idText, _, _ := strings.Cut(token, ":")
	id, _ := strconv.ParseInt(idText, 10, 64)
	s := &Server{
		BotID: id, Username: "hermes_test_bot", token: token,
		clock:     clock.System,
		changed:   make(chan struct{}),
		failures:  make(map[string][]Failure),
		holds:     make(map[string]chan struct{}),
		messages:  make(map[msgKey]string),
		markups:   make(map[msgKey]json.RawMessage),
		reactions: make(map[msgKey][]string),
		forums:    make(map[int64]bool),
		topics:    make(map[msgKey]string),
		drafts:    make(map[draftKey]string),
		chats:     make(map[int64]map[string]any),
		nextID:    100,
		files:     make(map[string]hostedFile),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{tok}/{method}", s.serve)
	mux.HandleFunc("GET /file/{tok}/{path...}", s.serveFile)
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Enqueue queues a raw Update (it must carry update_id) for getUpdates. Its
// message, if any, becomes one the bot can react to or delete.
func (s *Server) Enqueue(raw []byte) {
	s.Saw(raw)
	var head struct {
		ID int64 `json:"update_id"`
	}
	_ = json.Unmarshal(raw, &head)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updates = append(s.updates, queued{id: head.ID, raw: append(json.RawMessage(nil), raw...)})
	s.notify()
}

// Saw records the message of a raw Update (message or channel_post) as
// existing in its chat, as Telegram knows every message it delivered; tests
// that post updates to a webhook call it themselves.
func (s *Server) Saw(raw []byte) {
	type msg struct {
		ID   int    `json:"message_id"`
		Text string `json:"text"`
		Chat struct {
			ID int64 `json:"id"`
		} `json:"chat"`
	}
	var u struct {
		Message     *msg `json:"message"`
		ChannelPost *msg `json:"channel_post"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range []*msg{u.Message, u.ChannelPost} {
		if m != nil && m.ID != 0 {
			s.messages[msgKey{m.Chat.ID, m.ID}] = m.Text
		}
	}
}

// Fail makes the next call of method answer f (failures queue per method).
func (s *Server) Fail(method string, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[method] = append(s.failures[method], f)
}

// Hold makes the calls of method wait, once recorded, until release is
// called (or the caller gives up): a slow Telegram.
func (s *Server) Hold(method string) (release func()) {
	held := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds[method] = held
	return sync.OnceFunc(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.holds[method] == held {
			delete(s.holds, method)
		}
		close(held)
	})
}

// AddChat makes getChat for id answer chat (a ChatFullInfo object).
func (s *Server) AddChat(id int64, chat map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chats[id] = chat
}

// Calls returns the recorded calls of method ("" for all), oldest first.
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.callsLocked(method)
}

func (s *Server) callsLocked(method string) []Call {
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// SetClock makes c stamp the calls' At, e.g. the fake clock the platform
// under test runs on; the default is the real clock.
func (s *Server) SetClock(c clock.Clock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = c
}

// WaitCalls waits until n calls of method were recorded or ctx ends, and
// returns the calls seen so far.
func (s *Server) WaitCalls(ctx context.Context, method string, n int) ([]Call, error) {
	for {
		s.mu.Lock()
		calls, ch := s.callsLocked(method), s.changed
		s.mu.Unlock()
		if len(calls) >= n {
			return calls, nil
		}
		select {
		case <-ctx.Done():
			return calls, fmt.Errorf("telegramtest: %d of %d %s calls: %w", len(calls), n, method, ctx.Err())
		case <-ch:
		}
	}
}

// Registered returns the current webhook registration.
func (s *Server) Registered() Webhook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhook
}

// notify wakes waiters. Called with s.mu held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	tok, method := r.PathValue("tok"), r.PathValue("method")
	if !strings.HasPrefix(tok, "bot") {
		writeError(w, Failure{Code: http.StatusNotFound, Description: "Not Found"})
		return
	}
	if tok[len("bot"):] != s.token {
		writeError(w, Failure{Code: http.StatusUnauthorized, Description: "Unauthorized"})
		return
	}
	form, files, err := readForm(r)
	if err != nil {
		writeError(w, Failure{Code: http.StatusBadRequest, Description: "Bad Request: cannot parse the form"})
		return
	}
	s.mu.Lock()
	s.calls = append(s.calls, Call{Method: method, Form: form, Files: files, At: s.clock.Now()})
	s.notify()
	var fail *Failure
	if q := s.failures[method]; len(q) > 0 {
		fail = &q[0]
		s.failures[method] = q[1:]
	}
	held := s.holds[method]
	s.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-r.Context().Done():
			return
		}
	}
	if fail != nil {
		writeError(w, *fail)
		return
	}
	if method == "getUpdates" {
		s.getUpdates(w, r, form)
		return
	}
	result, f := s.answer(method, form, files)
	if f != nil {
		writeError(w, *f)
		return
	}
	writeResult(w, result)
}

// answer computes the result of every method but getUpdates.
func (s *Server) answer(method string, form map[string]string, files map[string]File) (any, *Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notify() // WaitMessages
	switch method {
	case "getMe":
		return map[string]any{"id": s.BotID, "is_bot": true, "first_name": "Hermes", "username": s.Username}, nil
	case "setWebhook":
		s.webhook = Webhook{URL: form["url"], SecretToken: form["secret_token"],
			AllowedUpdates: form["allowed_updates"], MaxConnections: form["max_connections"]}
		return true, nil
	case "deleteWebhook":
		s.webhook = Webhook{}
		return true, nil
	case "sendMessage":
		return s.sendMessage(form)
	case "editMessageText":
		return s.editMessageText(form)
	case "sendMessageDraft":
		return s.sendMessageDraft(form)
	case "sendChatAction":
		if _, f := chatID(form); f != nil {
			return nil, f
		}
		if f := threadCheck(form); f != nil {
			return nil, f
		}
		return true, nil
	case "answerCallbackQuery":
		return true, nil
	case "sendPhoto", "sendVoice", "sendAudio", "sendVideo", "sendDocument":
		return s.sendMedia(method, form, files)
	case "getFile":
		return s.getFile(form)
	case "createForumTopic":
		return s.createForumTopic(form)
	case "editForumTopic":
		chat, f := chatID(form)
		if f != nil {
			return nil, f
		}
		id, _ := strconv.Atoi(form["message_thread_id"])
		old, ok := s.topics[msgKey{chat, id}]
		switch {
		case !ok:
			return nil, &Failure{Code: 400, Description: "Bad Request: TOPIC_ID_INVALID"}
		case form["name"] == "" || utf8.RuneCountInString(form["name"]) > 128:
			return nil, &Failure{Code: 400, Description: "Bad Request: TOPIC_TITLE_EMPTY"}
		case form["name"] == old:
			return nil, &Failure{Code: 400, Description: "Bad Request: TOPIC_NOT_MODIFIED"}
		}
		s.topics[msgKey{chat, id}] = form["name"]
		return true, nil
	case "setMessageReaction":
		return s.setMessageReaction(form)
	case "deleteMessage":
		chat, f := chatID(form)
		if f != nil {
			return nil, f
		}
		id, _ := strconv.Atoi(form["message_id"])
		if _, ok := s.messages[msgKey{chat, id}]; !ok {
			return nil, &Failure{Code: 400, Description: "Bad Request: message to delete not found"}
		}
		delete(s.messages, msgKey{chat, id})
		delete(s.markups, msgKey{chat, id})
		return true, nil
	case "getChat":
		id, f := chatID(form)
		if f != nil {
			return nil, f
		}
		chat, ok := s.chats[id]
		if !ok {
			return nil, &Failure{Code: 400, Description: "Bad Request: chat not found"}
		}
		return chat, nil
	}
	return nil, &Failure{Code: http.StatusNotFound, Description: "Not Found"}
}

func (s *Server) sendMessage(form map[string]string) (any, *Failure) {
	chat, f := chatID(form)
	if f != nil {
		return nil, f
	}
	if f := threadCheck(form); f != nil {
		return nil, f
	}
	text, f := visibleText(form)
	if f != nil {
		return nil, f
	}
	markup, f := inlineKeyboard(form)
	if f != nil {
		return nil, f
	}
	s.nextID++
	s.messages[msgKey{chat, s.nextID}] = text
	msg := map[string]any{"message_id": s.nextID, "date": time.Now().Unix(), "chat": map[string]any{"id": chat, "type": "private"}, "text": text}
	if markup != nil {
		s.markups[msgKey{chat, s.nextID}] = markup
		msg["reply_markup"] = markup
	}
	if t := form["message_thread_id"]; t != "" {
		n, _ := strconv.Atoi(t)
		msg["message_thread_id"], msg["is_topic_message"] = n, true
	}
	return msg, nil
}

// sendMessageDraft answers sendMessageDraft as the Bot API does: true,
// after checking the chat is a private one (a positive id), draft_id a
// non-zero integer and the text as sendMessage's. The refusals' descriptions
// are this fake's own.
func (s *Server) sendMessageDraft(form map[string]string) (any, *Failure) {
	chat, f := chatID(form)
	if f != nil {
		return nil, f
	}
	if chat < 0 {
		return nil, &Failure{Code: 400, Description: "Bad Request: draft messages can be sent to private chats only"}
	}
	if f := threadCheck(form); f != nil {
		return nil, f
	}
	id, err := strconv.ParseInt(form["draft_id"], 10, 64)
	if err != nil || id == 0 {
		return nil, &Failure{Code: 400, Description: "Bad Request: invalid draft_id specified"}
	}
	text, f := visibleText(form)
	if f != nil {
		return nil, f
	}
	thread, _ := strconv.Atoi(form["message_thread_id"])
	s.drafts[draftKey{chat, thread, id}] = text
	return true, nil
}

// Draft returns the visible text of draft id in chat (thread 0: no topic),
// as the last sendMessageDraft left it.
func (s *Server) Draft(chat int64, thread int, id int64) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text, ok := s.drafts[draftKey{chat, thread, id}]
	return text, ok
}

func (s *Server) editMessageText(form map[string]string) (any, *Failure) {
	chat, f := chatID(form)
	if f != nil {
		return nil, f
	}
	id, _ := strconv.Atoi(form["message_id"])
	old, ok := s.messages[msgKey{chat, id}]
	if !ok {
		return nil, &Failure{Code: 400, Description: "Bad Request: message to edit not found"}
	}
	text, f := visibleText(form)
	if f != nil {
		return nil, f
	}
	if text == old {
		return nil, &Failure{Code: 400, Description: "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"}
	}
	s.messages[msgKey{chat, id}] = text
	return map[string]any{"message_id": id, "date": time.Now().Unix(), "chat": map[string]any{"id": chat, "type": "private"}, "text": text}, nil
}

// getUpdates answers from the queue at once, or holds the long poll until
// an update is queued, timeout seconds pass or the client goes away. An
// answer carries at most limit updates (1-100, default 100), as Telegram's.
func (s *Server) getUpdates(w http.ResponseWriter, r *http.Request, form map[string]string) {
	offset, _ := strconv.ParseInt(form["offset"], 10, 64)
	timeout, _ := strconv.Atoi(form["timeout"])
	limit, err := strconv.Atoi(form["limit"])
	if err != nil || limit < 1 || limit > maxUpdates {
		limit = maxUpdates
	}
	deadline := time.NewTimer(time.Duration(timeout) * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		// The offset confirms the updates handed out below it. One never
		// handed out stays: after a week without updates Telegram numbers
		// the next from a random, possibly lower, value, and hands it out
		// although a client's offset still follows the old numbering.
		s.updates = slices.DeleteFunc(s.updates, func(u queued) bool { return u.handed && u.id < offset })
		batch := make([]json.RawMessage, 0, len(s.updates))
		for i := range s.updates[:min(limit, len(s.updates))] {
			s.updates[i].handed = true
			batch = append(batch, s.updates[i].raw)
		}
		ch, onAnswer := s.changed, s.onAnswer
		s.mu.Unlock()
		if len(batch) > 0 {
			writeResult(w, batch)
			if onAnswer != nil {
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
				onAnswer(len(batch))
			}
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-deadline.C:
			writeResult(w, batch)
			return
		case <-ch:
		}
	}
}

// OnAnswer makes f run after each getUpdates answer that carries updates
// (f gets how many), once the answer is flushed to the client and before
// the handler returns: a crash test kills the client there, between
// fetching a batch and confirming it.
func (s *Server) OnAnswer(f func(updates int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onAnswer = f
}

// maxUpdates is the most updates one getUpdates answer carries.
const maxUpdates = 100

// AddForum makes chat a forum: createForumTopic works there (elsewhere it
// answers "the chat is not a forum").
func (s *Server) AddForum(chat int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forums[chat] = true
}

// Topic returns the name of forum topic id in chat.
func (s *Server) Topic(chat int64, id int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, ok := s.topics[msgKey{chat, id}]
	return name, ok
}

// CreateTopic creates a forum topic in chat as a member would in a
// Telegram client, and returns its id.
func (s *Server) CreateTopic(chat int64, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.topics[msgKey{chat, s.nextID}] = name
	return s.nextID
}

// RenameTopic renames forum topic id of chat (a Chat object, whose id must
// be the chat's) as member from (a User object) would in a Telegram client,
// and returns the update Telegram then sends: a service message in the
// topic whose forum_topic_edited carries the new name. It fails when the
// topic does not exist.
func (s *Server) RenameTopic(updateID int64, chat map[string]any, id int, name string, from map[string]any) ([]byte, error) {
	chatID, _ := chat["id"].(int64)
	s.mu.Lock()
	_, ok := s.topics[msgKey{chatID, id}]
	if ok {
		s.topics[msgKey{chatID, id}] = name
		s.nextID++
	}
	msgID := s.nextID
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("telegramtest: chat %d has no topic %d", chatID, id)
	}
	return json.Marshal(map[string]any{"update_id": updateID, "message": map[string]any{
		"message_id": msgID, "date": time.Now().Unix(), "chat": chat, "from": from,
		"message_thread_id": id, "is_topic_message": true, "forum_topic_edited": map[string]any{"name": name},
	}})
}

// WaitMessages waits until chat's messages (Messages) satisfy ok or ctx
// ends, and returns the last seen.
func (s *Server) WaitMessages(ctx context.Context, chat int64, ok func(map[int]string) bool) (map[int]string, error) {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		msgs := s.Messages(chat)
		if ok(msgs) {
			return msgs, nil
		}
		select {
		case <-ctx.Done():
			return msgs, fmt.Errorf("telegramtest: chat %d shows %v: %w", chat, msgs, ctx.Err())
		case <-ch:
		}
	}
}

// Messages returns the texts of chat's messages that exist (sent by the
// bot and not deleted, or queued as updates), by message id.
func (s *Server) Messages(chat int64) map[int]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]string{}
	for k, text := range s.messages {
		if k.chat == chat {
			out[k.id] = text
		}
	}
	return out
}

func (s *Server) createForumTopic(form map[string]string) (any, *Failure) {
	chat, f := chatID(form)
	if f != nil {
		return nil, f
	}
	name := form["name"]
	switch {
	case !s.forums[chat]:
		return nil, &Failure{Code: 400, Description: "Bad Request: the chat is not a forum"}
	case name == "" || utf8.RuneCountInString(name) > 128:
		return nil, &Failure{Code: 400, Description: "Bad Request: TOPIC_TITLE_EMPTY"}
	}
	s.nextID++
	s.topics[msgKey{chat, s.nextID}] = name
	return map[string]any{"message_thread_id": s.nextID, "name": name, "icon_color": 7322096}, nil
}

// ReactionEmoji is the curated set of emoji this fake accepts as
// reactions (a part of Telegram's); others answer REACTION_INVALID.
var ReactionEmoji = []string{"👍", "👎", "❤", "🔥", "🎉", "👀", "🤔", "👌", "🙏", "✍"}

// setMessageReaction sets the bot's reactions on a stored message: an
// absent or empty reaction list clears them.
func (s *Server) setMessageReaction(form map[string]string) (any, *Failure) {
	chat, f := chatID(form)
	if f != nil {
		return nil, f
	}
	id, _ := strconv.Atoi(form["message_id"])
	if _, ok := s.messages[msgKey{chat, id}]; !ok {
		return nil, &Failure{Code: 400, Description: "Bad Request: message to react not found"}
	}
	var set []struct {
		Type  string `json:"type"`
		Emoji string `json:"emoji"`
	}
	if raw := form["reaction"]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &set); err != nil {
			return nil, &Failure{Code: 400, Description: "Bad Request: can't parse reaction types JSON object"}
		}
	}
	if len(set) > 1 {
		return nil, &Failure{Code: 400, Description: "Bad Request: REACTIONS_TOO_MANY"}
	}
	var emoji []string
	for _, r := range set {
		if r.Type != "emoji" || !slices.Contains(ReactionEmoji, r.Emoji) {
			return nil, &Failure{Code: 400, Description: "Bad Request: REACTION_INVALID"}
		}
		emoji = append(emoji, r.Emoji)
	}
	s.reactions[msgKey{chat, id}] = emoji
	return true, nil
}

// Reactions returns the bot's reactions on message id of chat.
func (s *Server) Reactions(chat int64, id int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reactions[msgKey{chat, id}])
}

// HasMessage reports whether message id of chat exists (was sent by the
// bot and not deleted).
func (s *Server) HasMessage(chat int64, id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.messages[msgKey{chat, id}]
	return ok
}

// inlineKeyboard checks a reply_markup field as Telegram checks an inline
// keyboard: rows of buttons with a text and callback_data of 1 to 64
// bytes. It returns the markup (nil when there is none).
func inlineKeyboard(form map[string]string) (json.RawMessage, *Failure) {
	raw := form["reply_markup"]
	if raw == "" {
		return nil, nil
	}
	var m struct {
		InlineKeyboard [][]map[string]json.RawMessage `json:"inline_keyboard"`
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m.InlineKeyboard == nil {
		return nil, &Failure{Code: 400, Description: "Bad Request: can't parse reply keyboard markup JSON object"}
	}
	for _, row := range m.InlineKeyboard {
		for _, b := range row {
			var text, data, style string
			_ = json.Unmarshal(b["text"], &text)
			_ = json.Unmarshal(b["style"], &style)
			actions := 0
			for k := range b {
				if k != "text" && k != "style" && k != "icon_custom_emoji_id" {
					actions++
				}
			}
			switch {
			case strings.TrimSpace(text) == "":
				return nil, &Failure{Code: 400, Description: "Bad Request: text buttons are unallowed in the inline keyboard"}
			case actions != 1:
				return nil, &Failure{Code: 400, Description: "Bad Request: can't parse inline keyboard button: exactly one of the optional fields must be used"}
			case style != "" && style != "danger" && style != "success" && style != "primary":
				return nil, &Failure{Code: 400, Description: "Bad Request: BUTTON_STYLE_INVALID"}
			}
			if raw, ok := b["callback_data"]; ok {
				if json.Unmarshal(raw, &data) != nil || len(data) == 0 || len(data) > 64 {
					return nil, &Failure{Code: 400, Description: "Bad Request: BUTTON_DATA_INVALID"}
				}
			}
		}
	}
	return json.RawMessage(raw), nil
}

// PressButton returns the callback_query update Telegram sends when user
// from (a User object) presses the inline button with data on message
// msgID of chat (a Chat object, whose id must be the chat's): the query
// id is "cq<updateID>" and the message is the stored one, keyboard
// included. It fails when the message has no such button.
func (s *Server) PressButton(updateID int64, chat map[string]any, msgID int, data string, from map[string]any) ([]byte, error) {
	id, _ := chat["id"].(int64)
	s.mu.Lock()
	text, ok := s.messages[msgKey{id, msgID}]
	markup := s.markups[msgKey{id, msgID}]
	s.mu.Unlock()
	if !ok || !strings.Contains(string(markup), `"callback_data":`+strconv.Quote(data)) {
		return nil, fmt.Errorf("telegramtest: message %d in chat %d has no button %q", msgID, id, data)
	}
	return json.Marshal(map[string]any{"update_id": updateID, "callback_query": map[string]any{
		"id": "cq" + strconv.FormatInt(updateID, 10), "from": from, "chat_instance": "-4817263540", "data": data,
		"message": map[string]any{"message_id": msgID, "date": time.Now().Unix(), "chat": chat, "text": text,
			"from":         map[string]any{"id": s.BotID, "is_bot": true, "first_name": "Hermes", "username": s.Username},
			"reply_markup": markup},
	}})
}

// readForm reads a multipart/form-data body as it streams in: text fields
// (at most 1 MiB each) into the form, file fields hashed into files; a
// method without parameters comes with an empty body.
func readForm(r *http.Request) (map[string]string, map[string]File, error) {
	form := map[string]string{}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return form, nil, nil
	}
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, nil, err
	}
	var files map[string]File
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return form, files, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if part.FileName() != "" {
			h := sha256.New()
			n, err := io.Copy(h, part)
			if err != nil {
				return nil, nil, err
			}
			if files == nil {
				files = map[string]File{}
			}
			files[part.FormName()] = File{Name: part.FileName(), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
			continue
		}
		v, err := io.ReadAll(io.LimitReader(part, 1<<20))
		if err != nil {
			return nil, nil, err
		}
		form[part.FormName()] = string(v)
	}
}

func chatID(form map[string]string) (int64, *Failure) {
	id, err := strconv.ParseInt(form["chat_id"], 10, 64)
	if err != nil || id == 0 {
		return 0, &Failure{Code: 400, Description: "Bad Request: chat not found"}
	}
	return id, nil
}

// threadCheck refuses message_thread_id 1: the General topic takes none.
func threadCheck(form map[string]string) *Failure {
	if form["message_thread_id"] == "1" {
		return &Failure{Code: 400, Description: "Bad Request: message thread not found"}
	}
	return nil
}

// visibleText parses the text with its parse_mode and checks its length.
func visibleText(form map[string]string) (string, *Failure) {
	text := form["text"]
	switch form["parse_mode"] {
	case "":
	case "MarkdownV2":
		v, err := ParseMarkdownV2(text)
		if err != nil {
			return "", &Failure{Code: 400, Description: "Bad Request: " + err.Error()}
		}
		text = v
	default:
		return "", &Failure{Code: 400, Description: "Bad Request: unsupported parse_mode in this fake"}
	}
	if strings.TrimSpace(text) == "" {
		return "", &Failure{Code: 400, Description: "Bad Request: message text is empty"}
	}
	if utf8.RuneCountInString(text) > MaxTextRunes {
		return "", &Failure{Code: 400, Description: "Bad Request: message is too long"}
	}
	return text, nil
}

func writeResult(w http.ResponseWriter, result any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
}

func writeError(w http.ResponseWriter, f Failure) {
	body := map[string]any{"ok": false, "error_code": f.Code, "description": f.Description}
	params := map[string]any{}
	if f.RetryAfter > 0 {
		params["retry_after"] = f.RetryAfter
	}
	if f.MigrateToChatID != 0 {
		params["migrate_to_chat_id"] = f.MigrateToChatID
	}
	if len(params) > 0 {
		body["parameters"] = params
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.Code)
	_ = json.NewEncoder(w).Encode(body)
}
