// Package discordtest is a fake Discord for tests and load tools: a REST API
// and a Gateway WebSocket on loopback that speak Discord's real JSON (API v9),
// enough for discordgo and the connector's Discord platform.
//
// REST: GET /api/v9/gateway; GET /channels/{id}; GET /guilds/{id}; POST and
// PATCH channel messages; POST typing; POST message threads; POST
// /webhooks/{app}/{token} (interaction follow-ups, for tokens registered with
// AddInteractionToken); POST /interactions/{id}/{token}/callback; GET and
// PUT (bulk overwrite) /applications/{app}/commands and
// /applications/{app}/guilds/{guild}/commands, the latter answering 403
// Missing Access for a guild the bot is not in. Every call but webhooks and interaction
// callbacks needs "Authorization: Bot <Token>" (else 401); GET /gateway is public, as on Discord. Every request is
// recorded (Requests, WaitRequest), and Hook may answer any request itself,
// e.g. with a 429.
//
// Gateway (/gw/): HELLO, IDENTIFY -> READY plus one GUILD_CREATE per guild,
// RESUME -> the dispatches past its sequence number, then RESUMED;
// heartbeat -> ACK. A wrong token is closed with 4004,
// an intent in DisallowedIntents with 4014. Dispatch sends any event,
// CloseGateway closes the current connection with a code.
package discordtest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a Server.
type Options struct {
	// Token is the bot token the fake accepts ("Bot " + Token on REST).
	Token string
	// BotID, BotName and AppID describe the bot; defaults 9000, hermes, 9000.
	BotID, BotName, AppID string
	// DisallowedIntents are intents the application may not use (e.g.
	// 1<<15, MESSAGE_CONTENT): identifying with one closes with 4014.
	DisallowedIntents int
	// HeartbeatInterval in HELLO; default 41250 ms.
	HeartbeatInterval int
	// Silent makes the Gateway accept the socket and never send HELLO.
	Silent bool
}

// Channel is a channel or thread as Discord's JSON describes it.
type Channel struct {
	ID       string  `json:"id"`
	Type     int     `json:"type"`
	GuildID  string  `json:"guild_id,omitempty"`
	Name     string  `json:"name,omitempty"`
	ParentID string  `json:"parent_id,omitempty"`
	Topic    *string `json:"topic,omitempty"`
	OwnerID  string  `json:"owner_id,omitempty"`
	// Recipients is a DM channel's user, as Discord lists it (the bot is
	// not listed).
	Recipients []Recipient `json:"recipients,omitempty"`
}

// Recipient is a DM channel's user.
type Recipient struct {
	ID       string `json:"id"`
	Username string `json:"username"`
}

// Guild is a guild with its channels and active threads.
type Guild struct {
	ID   string
	Name string
}

// Request is one recorded REST call.
type Request struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	// Body is the JSON body, or a multipart request's payload_json.
	Body []byte
	// Files are a multipart request's file parts, hashed as they streamed.
	Files []Attachment
}

// Message is a message the fake stores.
type Message struct {
	ID         string
	ChannelID  string
	Content    string
	ReplyTo    string
	Edited     bool
	Components []Component
	// Attachments are the files the message was posted with.
	Attachments []Attachment
	// Reactions are the bot's own reactions, in the order added.
	Reactions []string
}

// Component is an action row (type 1) or a button (type 2) of a message.
type Component struct {
	Type       int         `json:"type"`
	Style      int         `json:"style,omitempty"`
	Label      string      `json:"label,omitempty"`
	CustomID   string      `json:"custom_id,omitempty"`
	Components []Component `json:"components,omitempty"`
}

// Server is the fake Discord.
type Server struct {
	// URL is the HTTP base to use as the platform's APIBaseURL.
	URL string
	// GatewayURL is what GET /api/v9/gateway answers.
	GatewayURL string
	opts       Options
	srv        *httptest.Server

	mu        sync.Mutex
	hook      func(w http.ResponseWriter, r *http.Request, body []byte) bool
	guilds    []Guild
	channels  map[string]Channel
	messages  map[string]*Message
	order     []string
	tokens    map[string]string // interaction token -> the channel its follow-ups go to
	commands  []map[string]any
	guildCmds map[string][]map[string]any
	requests  []Request
	changed   chan struct{} // closed and replaced on every recorded change
	nextID    uint64
	conn      *gwConn
	sessionID string
	seq       int64
	sent      []dispatched // this session's dispatches, for a RESUME
	identify  int
	resume    int
	dials     int
	answers   []int         // the op answering each HELLO (2 IDENTIFY, 6 RESUME)
	refuse    int           // close code every RESUME is answered with, 0 for none
	held      chan struct{} // while non-nil, a new session's GUILD_CREATEs wait for its close
	holding   bool          // a session's READY went out and its GUILD_CREATEs wait
	closers   sync.WaitGroup
	closed    bool
}

// New starts a fake Discord; it stops when the test ends.
func New(tb interface {
	Helper()
	Cleanup(func())
}, opts Options) *Server {
	tb.Helper()
	opts.BotID = cmp.Or(opts.BotID, "9000")
	opts.AppID = cmp.Or(opts.AppID, opts.BotID)
	opts.BotName = cmp.Or(opts.BotName, "hermes")
	opts.HeartbeatInterval = cmp.Or(opts.HeartbeatInterval, 41250)
	s := &Server{
		opts: opts, channels: map[string]Channel{}, messages: map[string]*Message{},
		tokens: map[string]string{}, guildCmds: map[string][]map[string]any{}, changed: make(chan struct{}), nextID: 1_400_000_000_000_000_000,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/gw/", s.serveGateway)
	mux.HandleFunc("/api/v9/", s.serveREST)
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	s.GatewayURL = "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/gw"
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server and closes the Gateway connection.
func (s *Server) Close() {
	s.mu.Lock()
	c := s.conn
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already {
		return
	}
	if c != nil {
		c.c.CloseNow()
	}
	s.srv.CloseClientConnections()
	s.srv.Close()
	s.closers.Wait()
}

// Options returns the server's effective options.
func (s *Server) Options() Options { return s.opts }

// AddGuild adds a guild with its channels (sent in GUILD_CREATE).
func (s *Server) AddGuild(g Guild, channels ...Channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guilds = append(s.guilds, g)
	for _, c := range channels {
		if c.GuildID == "" && c.Type != 1 {
			c.GuildID = g.ID
		}
		s.channels[c.ID] = c
	}
}

// RemoveGuild removes guild id, as when the bot is removed from it: the
// next session's READY no longer lists it (no GUILD_DELETE is sent).
func (s *Server) RemoveGuild(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guilds = slices.DeleteFunc(s.guilds, func(g Guild) bool { return g.ID == id })
}

// AddChannel adds a channel or thread that GET /channels/{id} answers.
func (s *Server) AddChannel(c Channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels[c.ID] = c
}

// AddInteractionToken makes POST /webhooks/{app}/{token} accept token,
// its follow-ups kept in a channel named "webhook".
func (s *Server) AddInteractionToken(token string) { s.AddInteractionTokenIn(token, "webhook") }

// AddInteractionTokenIn makes POST /webhooks/{app}/{token} accept token,
// its follow-ups posted in channelID, the interaction's channel, as on
// Discord (where PATCH and DELETE of the channel's messages reach them).
func (s *Server) AddInteractionTokenIn(token, channelID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = channelID
}

// SetHook installs fn in front of every REST route: when it returns true it
// has answered the request itself. body is the request body.
func (s *Server) SetHook(fn func(w http.ResponseWriter, r *http.Request, body []byte) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = fn
}

// Requests returns the REST calls recorded so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// WaitRequest returns the first recorded request matching match, waiting
// for it until ctx ends.
func (s *Server) WaitRequest(ctx context.Context, match func(Request) bool) (Request, error) {
	for i := 0; ; {
		s.mu.Lock()
		for ; i < len(s.requests); i++ {
			if match(s.requests[i]) {
				r := s.requests[i]
				s.mu.Unlock()
				return r, nil
			}
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Request{}, fmt.Errorf("discordtest: no matching request: %w", ctx.Err())
		}
	}
}

// Messages returns the messages of a channel, oldest first.
func (s *Server) Messages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, id := range s.order {
		if m, ok := s.messages[id]; ok && m.ChannelID == channelID {
			out = append(out, *m)
		}
	}
	return out
}

// Commands returns the registered global commands.
func (s *Server) Commands() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.commands...)
}

// GuildCommands returns the commands registered on guild guildID.
func (s *Server) GuildCommands(guildID string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.guildCmds[guildID]...)
}

// Identifies and Resumes count Gateway sessions started and resumed.
func (s *Server) Identifies() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identify
}

// Dials counts Gateway connections accepted, refused ones included.
func (s *Server) Dials() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dials
}

// Handshakes lists, per Gateway connection that got past HELLO, the op the
// client answered HELLO with: 2 (IDENTIFY) or 6 (RESUME).
func (s *Server) Handshakes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.answers...)
}

// RefuseResumes makes every later RESUME be answered by closing the Gateway
// with code (4007 invalid seq, 4009 session timed out: the client must start
// a new session); 0 resumes again.
func (s *Server) RefuseResumes(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = code
}

// HoldGuildCreates makes the next sessions' GUILD_CREATEs wait, after
// their READY, until release is called (as a new session's guilds arrive
// over the seconds after READY).
func (s *Server) HoldGuildCreates() (release func()) {
	held := make(chan struct{})
	s.mu.Lock()
	s.held = held
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.held == held {
				s.held = nil
			}
			s.mu.Unlock()
			close(held)
		})
	}
}

// Holding reports whether a session's READY went out and its GUILD_CREATEs
// wait for HoldGuildCreates' release.
func (s *Server) Holding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding
}

// Resumes: see Identifies.
func (s *Server) Resumes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resume
}

// notifyLocked wakes WaitRequest and WaitSession callers.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// discordEpoch is the first millisecond of 2015, Discord's snowflake epoch.
const discordEpoch = 1420070400000

// newIDLocked mints a snowflake of now, as Discord's ids are.
func (s *Server) newIDLocked() string {
	s.nextID = max(s.nextID+1, uint64(time.Now().UnixMilli()-discordEpoch)<<22)
	return strconv.FormatUint(s.nextID, 10)
}

// Sign returns the X-Signature-Ed25519 value Discord sends for body at
// timestamp ts.
func Sign(priv ed25519.PrivateKey, ts string, body []byte) string {
	return hex.EncodeToString(ed25519.Sign(priv, append([]byte(ts), body...)))
}

// InteractionRequest builds a signed POST of body to url, as Discord sends
// interactions, stamped at ts.
func InteractionRequest(url string, priv ed25519.PrivateKey, ts time.Time, body []byte) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	stamp := strconv.FormatInt(ts.Unix(), 10)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Signature-Timestamp", stamp)
	r.Header.Set("X-Signature-Ed25519", Sign(priv, stamp, body))
	return r
}

func readBody(r *http.Request) []byte {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"message": msg, "code": code})
}

var errNoGateway = errors.New("discordtest: no Gateway session")

// PressButton returns the body of the component interaction (type 3)
// Discord sends when user (id, username) presses the button with customID
// on message msgID: the interaction id and token are id and token, and the
// message is the stored one, components included. It fails when the
// message does not exist or carries no such button.
func (s *Server) PressButton(id, token, msgID, customID, userID, userName string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[msgID]
	if !ok {
		return nil, fmt.Errorf("discordtest: no message %s", msgID)
	}
	found := false
	for _, row := range m.Components {
		for _, b := range row.Components {
			found = found || b.CustomID == customID
		}
	}
	if !found {
		return nil, fmt.Errorf("discordtest: message %s has no button %q", msgID, customID)
	}
	ch := s.channels[m.ChannelID]
	s.tokens[token] = "webhook"
	user := map[string]any{"id": userID, "username": userName, "global_name": nil, "discriminator": "0", "avatar": nil}
	in := map[string]any{
		"id": id, "application_id": s.opts.AppID, "type": 3, "token": token, "version": 1,
		"channel_id": m.ChannelID, "channel": ch, "message": s.messageJSON(m),
		"data":   map[string]any{"custom_id": customID, "component_type": 2},
		"locale": "en-US", "app_permissions": "2248473465835073", "entitlements": []any{},
	}
	if ch.GuildID != "" {
		in["guild_id"] = ch.GuildID
		in["guild_locale"] = "en-US"
		in["member"] = map[string]any{"user": user, "roles": []any{}, "nick": nil, "joined_at": "2025-01-01T00:00:00.000000+00:00",
			"deaf": false, "mute": false, "flags": 0, "permissions": "2248473465835073"}
	} else {
		in["user"] = user
	}
	return json.Marshal(in)
}
