// Package slacktest is a fake Slack for tests and load tools: the Web API,
// file upload and download URLs, response_urls, the OAuth v2 exchange and
// Socket Mode, on loopback, speaking Slack's real JSON. It is built on
// slack-go's slacktest server (its mux and lifecycle), with every method
// the connector calls answered here from the fake's own workspaces.
//
// Web API (POST /<method>, form or JSON, the token in the form or as
// "Authorization: Bearer"): auth.test, users.info, conversations.info,
// conversations.replies, chat.postMessage, chat.update, chat.delete,
// chat.postEphemeral, chat.startStream, chat.appendStream,
// chat.stopStream, reactions.add, reactions.remove,
// files.getUploadURLExternal, files.completeUploadExternal, files.info,
// assistant.threads.setStatus, oauth.v2.access, apps.connections.open. A
// missing or unknown token answers invalid_auth, a revoked one
// token_revoked, an unknown channel channel_not_found, as Slack does.
// Every call is recorded (Calls, WaitCalls); Fail429 makes a method answer
// HTTP 429 with Retry-After.
//
// Also: POST /upload/<file> takes an external upload's bytes; GET
// /files-pri/<team>-<file>/<name> serves a file added with AddFile to its
// workspace's token only; POST /response/<id> records a response_url post;
// GET /oauth/v2/authorize is where the install flow sends the browser; GET
// /socket is the Socket Mode WebSocket (hello, envelopes from PushEvent,
// acks recorded).
package slacktest

import (
	"cmp"
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
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	upstream "github.com/slack-go/slack/slacktest"
)

// Team is one fake workspace.
type Team struct {
	ID, Name string
	// Token is its bot token (xoxb-...).
	Token string
	// BotUser and BotID are the app's bot user and bot in it.
	BotUser, BotID string
}

// User is a user of a workspace, as users.info answers it.
type User struct {
	ID, Name, RealName, DisplayName string
	IsBot                           bool
}

// Channel is a conversation of a workspace, as conversations.info answers
// it.
type Channel struct {
	ID, Name string
	IsIM     bool
	IsMPIM   bool
	// Peer is an IM's other user.
	Peer string
	// SharedTeams are the workspaces a Slack Connect channel is shared
	// with (conversations.info's shared_team_ids); add the channel to
	// each of them too for their tokens to reach it.
	SharedTeams []string
	// OrgTeams are the workspaces of its Enterprise Grid org an org-shared
	// channel is shared to (conversations.info's internal_team_ids); add
	// the channel to each of them too for their tokens to reach it.
	OrgTeams []string
	// Context is conversations.info's context_team_id when it is not the
	// asking token's workspace (an org-wide token answering for another
	// workspace of its Enterprise Grid org).
	Context string
	// NoContext leaves context_team_id out of conversations.info's answer.
	NoContext bool
}

// Message is a message the fake holds. Team is its author's workspace
// (the message's team); conversations.replies shows it to that
// workspace's token, and in a Slack Connect channel (SharedTeams) to the
// token of every workspace the channel is shared with, as Slack does.
type Message struct {
	Team, Channel, TS, ThreadTS string
	User, BotID, Text           string
	Blocks                      json.RawMessage
	// Files are the ids of files added with AddFile (in the message's
	// team), listed in its files.
	Files   []string
	Deleted bool
	// Stream is set while a chat.startStream message is open.
	Stream bool
}

// Call is one recorded Web API call.
type Call struct {
	Method string
	Team   string // the workspace of the token ("" when it was unknown)
	Form   url.Values
	// JSON is the body of a JSON call.
	JSON []byte
}

// Upload is one external upload.
type Upload struct {
	FileID, Filename string
	Size             int
	// SHA256 is the hex digest of the bytes received at the upload URL.
	SHA256   string
	Received int
	Shared   bool
	Channel  string
	ThreadTS string
	Comment  string
	TS       string
}

// ResponsePost is one post to a response_url.
type ResponsePost struct {
	ID   string
	Body map[string]any
}

// Server is a fake Slack.
type Server struct {
	up  *upstream.Server
	URL string // the Web API base, with a trailing slash

	mu        sync.Mutex
	changed   chan struct{}
	teams     map[string]*Team // by id
	tokens    map[string]string
	revoked   map[string]bool
	users     map[string]User    // team/user
	channels  map[string]Channel // team/channel
	messages  []*Message
	calls     []Call
	uploads   map[string]*Upload
	files     map[string]servedFile // path -> file
	fileIDs   map[string]string     // team/id -> path
	responses []ResponsePost
	stalled   chan<- string            // StallResponses'
	stallCall map[string]chan<- string // StallMethod's: method -> where its calls are reported
	fail429   map[string]int           // method -> 429s left
	fail404   map[string]int           // method -> 404s left
	retry     time.Duration
	codes     map[string]Team // oauth code -> the install it grants
	lastTS    int64
	sockets   *sockets
}

type servedFile struct {
	team, id, name, contentType, url string
	data                             []byte
	started                          chan<- string // AddStalledFile's
}

// New starts a fake Slack and stops it when tb's test ends.
func New(tb interface {
	Helper()
	Cleanup(func())
}) *Server {
	tb.Helper()
	s := &Server{
		changed: make(chan struct{}), teams: map[string]*Team{}, tokens: map[string]string{}, revoked: map[string]bool{},
		users: map[string]User{}, channels: map[string]Channel{}, uploads: map[string]*Upload{},
		files: map[string]servedFile{}, fileIDs: map[string]string{}, fail429: map[string]int{}, fail404: map[string]int{}, codes: map[string]Team{},
		lastTS: 1768490000 * 1_000_000,
	}
	s.sockets = newSockets(s)
	s.up = upstream.NewTestServer(func(c upstream.Customize) {
		for _, m := range webMethods {
			c.Handle("/"+m, s.serveMethod)
		}
		c.Handle("/upload/", s.serveUpload)
		c.Handle("/files-pri/", s.serveFile)
		c.Handle("/signin", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in</body></html>")
		})
		c.Handle("/response/", s.serveResponse)
		c.Handle("/oauth/v2/authorize", s.serveAuthorize)
		c.Handle("/socket", s.sockets.serve)
	})
	s.up.Start()
	s.URL = s.up.GetAPIURL()
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server and its sockets.
func (s *Server) Close() {
	s.sockets.closeAll()
	s.up.Stop()
}

// webMethods are the Web API methods the fake answers.
var webMethods = []string{
	"auth.test", "users.info", "conversations.info", "conversations.replies", "chat.postMessage", "chat.update",
	"chat.delete", "chat.postEphemeral", "chat.startStream", "chat.appendStream", "chat.stopStream", "reactions.add",
	"reactions.remove", "files.getUploadURLExternal", "files.completeUploadExternal", "files.info",
	"assistant.threads.setStatus", "oauth.v2.access", "apps.connections.open",
}

// AddTeam adds a workspace (its token works at once).
func (s *Server) AddTeam(t Team) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tt := t
	s.teams[t.ID] = &tt
	if t.Token != "" {
		s.tokens[t.Token] = t.ID
	}
}

// AddUser adds a user of team.
func (s *Server) AddUser(team string, u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[team+"/"+u.ID] = u
}

// AddChannel adds a conversation of team.
func (s *Server) AddChannel(team string, c Channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels[team+"/"+c.ID] = c
}

// AddMessage puts a message in a channel (a thread's root, say).
func (s *Server) AddMessage(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mm := m
	s.messages = append(s.messages, &mm)
}

// AddFile serves data at the files-pri path of file id in team, to that
// workspace's token, and returns its URL.
func (s *Server) AddFile(team, id, name, contentType string, data []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := "/files-pri/" + team + "-" + id + "/" + url.PathEscape(name)
	u := strings.TrimSuffix(s.URL, "/") + path
	s.files[path] = servedFile{team: team, id: id, name: name, contentType: contentType, data: data, url: u}
	s.fileIDs[team+"/"+id] = path
	return u
}

// AddStalledFile is AddFile for a file whose download never answers: each
// request for it is reported on started, then held until its client gives
// up.
func (s *Server) AddStalledFile(team, id, name, contentType string, started chan<- string) string {
	u := s.AddFile(team, id, name, contentType, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.fileIDs[team+"/"+id]
	f := s.files[path]
	f.started = started
	s.files[path] = f
	return u
}

// Revoke makes a token answer token_revoked.
func (s *Server) Revoke(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[token] = true
}

// Fail404 makes the next n calls of method answer HTTP 404, as a host
// that is not Slack's, or Slack having a bad moment, may.
func (s *Server) Fail404(method string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail404[method] = n
}

// Fail429 makes the next n calls of method answer HTTP 429 with
// Retry-After retry (rounded up to seconds, at least 1).
func (s *Server) Fail429(method string, n int, retry time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail429[method] = n
	s.retry = retry
}

// AddOAuthCode makes oauth.v2.access exchange code for an install of t
// (its bot token is t.Token); the team is added when the code is used.
func (s *Server) AddOAuthCode(code string, t Team) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = t
}

// Calls returns the recorded calls of method ("" for all).
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// WaitCalls waits until method was called n times, and returns its calls.
func (s *Server) WaitCalls(ctx context.Context, method string, n int) ([]Call, error) {
	return waitFor(ctx, s, func() ([]Call, bool) {
		c := s.callsLocked(method)
		return c, len(c) >= n
	}, fmt.Sprintf("%d %s calls", n, method))
}

func (s *Server) callsLocked(method string) []Call {
	var out []Call
	for _, c := range s.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Messages returns the messages of a channel (of any workspace), in the
// order they were posted.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if m.Channel == channel {
			out = append(out, *m)
		}
	}
	return out
}

// WaitMessages waits until channel holds n messages.
func (s *Server) WaitMessages(ctx context.Context, channel string, n int) ([]Message, error) {
	return waitFor(ctx, s, func() ([]Message, bool) {
		var out []Message
		for _, m := range s.messages {
			if m.Channel == channel {
				out = append(out, *m)
			}
		}
		return out, len(out) >= n
	}, fmt.Sprintf("%d messages in %s", n, channel))
}

// Uploads returns the external uploads.
func (s *Server) Uploads() []Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Upload
	for _, u := range s.uploads {
		out = append(out, *u)
	}
	return out
}

// Responses returns the posts to response_urls.
func (s *Server) Responses() []ResponsePost {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ResponsePost(nil), s.responses...)
}

// WaitResponses waits until n posts to response_urls were recorded.
func (s *Server) WaitResponses(ctx context.Context, n int) ([]ResponsePost, error) {
	return waitFor(ctx, s, func() ([]ResponsePost, bool) {
		return append([]ResponsePost(nil), s.responses...), len(s.responses) >= n
	}, fmt.Sprintf("%d response_url posts", n))
}

// ResponseURL is a response_url the fake records posts to.
func (s *Server) ResponseURL(id string) string {
	return strings.TrimSuffix(s.URL, "/") + "/response/" + id
}

// waitFor waits, without polling, until check says ok (it runs with s.mu
// held), or ctx ends.
func waitFor[T any](ctx context.Context, s *Server, check func() (T, bool), what string) (T, error) {
	for {
		s.mu.Lock()
		v, ok := check()
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return v, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return v, fmt.Errorf("slacktest: waiting for %s: %w", what, ctx.Err())
		}
	}
}

// notifyLocked wakes the waiters. Called with s.mu held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// nextTSLocked is a new message ts. Called with s.mu held.
func (s *Server) nextTSLocked() string {
	s.lastTS += 100
	return fmt.Sprintf("%d.%06d", s.lastTS/1_000_000, s.lastTS%1_000_000)
}

// writeJSON answers v.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers Slack's ok:false.
func fail(w http.ResponseWriter, code string) {
	writeJSON(w, map[string]any{"ok": false, "error": code})
}

// args are a call's arguments, from a form or a JSON body.
type args struct {
	form url.Values
	json map[string]any
	raw  []byte
}

func (a args) get(k string) string {
	if v := a.form.Get(k); v != "" {
		return v
	}
	switch v := a.json[k].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// readArgs reads a call's arguments and its token.
func readArgs(r *http.Request) (args, string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		return args{}, "", err
	}
	a := args{form: url.Values{}, raw: body}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case len(body) == 0:
	case ct == "application/json":
		if err := json.Unmarshal(body, &a.json); err != nil {
			return args{}, "", err
		}
	default:
		if a.form, err = url.ParseQuery(string(body)); err != nil {
			return args{}, "", err
		}
	}
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if t := a.get("token"); t != "" {
		token = t
	}
	return a, token, nil
}

// serveMethod answers one Web API call.
func (s *Server) serveMethod(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/")
	a, token, err := readArgs(r)
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if started := s.stallCall[method]; started != nil {
		s.mu.Unlock()
		started <- method
		<-r.Context().Done()
		return
	}
	defer s.mu.Unlock()
	team := s.tokens[token]
	s.calls = append(s.calls, Call{Method: method, Team: team, Form: a.form, JSON: a.raw})
	defer s.notifyLocked()
	if n := s.fail404[method]; n > 0 {
		s.fail404[method] = n - 1
		http.NotFound(w, r)
		return
	}
	if n := s.fail429[method]; n > 0 {
		s.fail429[method] = n - 1
		w.Header().Set("Retry-After", strconv.Itoa(max(int((s.retry+time.Second-1)/time.Second), 1)))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	switch method {
	case "oauth.v2.access":
		s.oauthAccess(w, a)
		return
	case "apps.connections.open":
		if s.revoked[token] {
			fail(w, "token_revoked")
			return
		}
		if !strings.HasPrefix(token, "xapp-") {
			fail(w, "invalid_auth")
			return
		}
		writeJSON(w, map[string]any{"ok": true, "url": "ws" + strings.TrimPrefix(strings.TrimSuffix(s.URL, "/"), "http") + "/socket"})
		return
	}
	switch {
	case s.revoked[token]:
		fail(w, "token_revoked")
		return
	case team == "":
		fail(w, "invalid_auth")
		return
	}
	t := s.teams[team]
	s.answer(w, method, t, a)
}

// answer answers method for workspace t. Called with s.mu held.
func (s *Server) answer(w http.ResponseWriter, method string, t *Team, a args) {
	channel := a.get("channel")
	if channel == "" {
		channel = a.get("channel_id")
	}
	needChannel := map[string]bool{"conversations.info": true, "conversations.replies": true, "chat.postMessage": true,
		"chat.update": true, "chat.delete": true, "chat.postEphemeral": true, "chat.startStream": true,
		"chat.appendStream": true, "chat.stopStream": true, "reactions.add": true, "reactions.remove": true,
		"assistant.threads.setStatus": true}
	if needChannel[method] {
		if _, ok := s.channels[t.ID+"/"+channel]; !ok {
			fail(w, "channel_not_found")
			return
		}
	}
	switch method {
	case "auth.test":
		writeJSON(w, map[string]any{"ok": true, "url": "https://" + strings.ToLower(t.Name) + ".slack.com/", "team": t.Name,
			"user": "hermes", "team_id": t.ID, "user_id": t.BotUser, "bot_id": t.BotID})
	case "users.info":
		u, ok := s.users[t.ID+"/"+a.get("user")]
		if !ok {
			fail(w, "user_not_found")
			return
		}
		writeJSON(w, map[string]any{"ok": true, "user": map[string]any{
			"id": u.ID, "team_id": t.ID, "name": u.Name, "real_name": u.RealName, "is_bot": u.IsBot, "deleted": false,
			"profile": map[string]any{"display_name": u.DisplayName, "real_name": u.RealName},
		}})
	case "conversations.info":
		c := s.channels[t.ID+"/"+channel]
		ch := map[string]any{"id": c.ID, "is_im": c.IsIM, "is_mpim": c.IsMPIM, "is_channel": !c.IsIM && !c.IsMPIM,
			"context_team_id": cmp.Or(c.Context, t.ID)}
		if len(c.SharedTeams) > 0 {
			ch["is_shared"], ch["is_ext_shared"], ch["shared_team_ids"] = true, true, c.SharedTeams
		}
		if c.NoContext {
			delete(ch, "context_team_id")
		}
		if len(c.OrgTeams) > 0 {
			ch["is_shared"], ch["is_org_shared"], ch["internal_team_ids"] = true, true, c.OrgTeams
		}
		if c.IsIM {
			ch["user"] = c.Peer
		} else {
			ch["name"], ch["name_normalized"] = c.Name, c.Name
		}
		writeJSON(w, map[string]any{"ok": true, "channel": ch})
	case "conversations.replies":
		ts := a.get("ts")
		var msgs []any
		for _, m := range s.messages {
			if (m.Team == t.ID || slices.Contains(s.channels[t.ID+"/"+channel].SharedTeams, m.Team)) && m.Channel == channel && !m.Deleted && (m.TS == ts || m.ThreadTS == ts) {
				msgs = append(msgs, s.messageJSON(m))
			}
		}
		if len(msgs) == 0 {
			fail(w, "thread_not_found")
			return
		}
		if limit, _ := strconv.Atoi(a.get("limit")); limit > 0 && len(msgs) > limit {
			msgs = msgs[:limit]
		}
		writeJSON(w, map[string]any{"ok": true, "messages": msgs, "has_more": false})
	case "chat.postMessage", "chat.startStream":
		text := a.get("text")
		if method == "chat.startStream" {
			text = a.get("markdown_text")
		} else if strings.TrimSpace(text) == "" && a.get("blocks") == "" {
			fail(w, "no_text")
			return
		}
		m := &Message{Team: t.ID, Channel: channel, TS: s.nextTSLocked(), ThreadTS: a.get("thread_ts"), User: t.BotUser,
			BotID: t.BotID, Text: text, Stream: method == "chat.startStream"}
		if b := a.get("blocks"); b != "" {
			m.Blocks = json.RawMessage(b)
		}
		s.messages = append(s.messages, m)
		writeJSON(w, map[string]any{"ok": true, "channel": channel, "ts": m.TS, "message": s.messageJSON(m)})
	case "chat.update", "chat.appendStream", "chat.stopStream", "chat.delete":
		m := s.findLocked(t.ID, channel, a.get("ts"))
		if m == nil {
			fail(w, "message_not_found")
			return
		}
		switch method {
		case "chat.update":
			m.Text = a.get("text")
			if b := a.get("blocks"); b != "" {
				m.Blocks = json.RawMessage(b)
			}
		case "chat.appendStream", "chat.stopStream":
			if !m.Stream {
				fail(w, "message_not_in_streaming_state")
				return
			}
			m.Text += a.get("markdown_text")
			m.Stream = method == "chat.appendStream"
		case "chat.delete":
			m.Deleted = true
		}
		writeJSON(w, map[string]any{"ok": true, "channel": channel, "ts": m.TS, "text": m.Text})
	case "chat.postEphemeral":
		writeJSON(w, map[string]any{"ok": true, "message_ts": s.nextTSLocked()})
	case "reactions.add", "reactions.remove":
		if s.findLocked(t.ID, channel, a.get("timestamp")) == nil {
			fail(w, "message_not_found")
			return
		}
		writeJSON(w, map[string]any{"ok": true})
	case "assistant.threads.setStatus":
		writeJSON(w, map[string]any{"ok": true})
	case "files.getUploadURLExternal":
		size, _ := strconv.Atoi(a.get("length"))
		if a.get("filename") == "" || size <= 0 {
			fail(w, "invalid_arguments")
			return
		}
		id := fmt.Sprintf("F%06d", len(s.uploads)+1)
		s.uploads[id] = &Upload{FileID: id, Filename: a.get("filename"), Size: size}
		writeJSON(w, map[string]any{"ok": true, "file_id": id, "upload_url": strings.TrimSuffix(s.URL, "/") + "/upload/" + id})
	case "files.completeUploadExternal":
		var files []struct{ ID, Title string }
		if err := json.Unmarshal([]byte(a.get("files")), &files); err != nil || len(files) == 0 {
			fail(w, "invalid_arguments")
			return
		}
		var out []any
		for _, f := range files {
			u := s.uploads[f.ID]
			if u == nil || u.Received != u.Size {
				fail(w, "file_not_found")
				return
			}
			if channel != "" {
				if _, ok := s.channels[t.ID+"/"+channel]; !ok {
					fail(w, "channel_not_found")
					return
				}
				m := &Message{Team: t.ID, Channel: channel, TS: s.nextTSLocked(), ThreadTS: a.get("thread_ts"), User: t.BotUser,
					BotID: t.BotID, Text: a.get("initial_comment")}
				s.messages = append(s.messages, m)
				u.Shared, u.Channel, u.ThreadTS, u.Comment, u.TS = true, channel, m.ThreadTS, m.Text, m.TS
			}
			out = append(out, map[string]any{"id": f.ID, "title": f.Title})
		}
		writeJSON(w, map[string]any{"ok": true, "files": out})
	case "files.info":
		u := s.uploads[a.get("file")]
		if path, ok := s.fileIDs[t.ID+"/"+a.get("file")]; u == nil && ok {
			f := s.files[path]
			writeJSON(w, map[string]any{"ok": true, "file": map[string]any{"id": f.id, "name": f.name, "mimetype": f.contentType,
				"size": len(f.data), "url_private": f.url, "url_private_download": f.url}})
			return
		}
		if u == nil {
			fail(w, "file_not_found")
			return
		}
		shares := map[string]any{}
		if u.Shared {
			shares["public"] = map[string]any{u.Channel: []any{map[string]any{"ts": u.TS, "thread_ts": u.ThreadTS}}}
		}
		writeJSON(w, map[string]any{"ok": true, "file": map[string]any{"id": u.FileID, "name": u.Filename, "size": u.Size, "shares": shares}})
	default:
		fail(w, "unknown_method")
	}
}

// findLocked returns the message ts of channel in team.
func (s *Server) findLocked(team, channel, ts string) *Message {
	for _, m := range s.messages {
		if m.Team == team && m.Channel == channel && m.TS == ts && !m.Deleted {
			return m
		}
	}
	return nil
}

// messageJSON is m as the Web API shows it. Called with s.mu held.
func (s *Server) messageJSON(m *Message) map[string]any {
	out := map[string]any{"type": "message", "ts": m.TS, "text": m.Text, "user": m.User, "team": m.Team}
	if m.BotID != "" {
		out["bot_id"] = m.BotID
	}
	if m.ThreadTS != "" {
		out["thread_ts"] = m.ThreadTS
	}
	if len(m.Blocks) > 0 {
		out["blocks"] = m.Blocks
	}
	if len(m.Files) > 0 {
		files := make([]any, 0, len(m.Files))
		for _, id := range m.Files {
			f := s.files[s.fileIDs[m.Team+"/"+id]]
			files = append(files, map[string]any{"id": id, "name": f.name, "mimetype": f.contentType, "size": len(f.data),
				"url_private": f.url, "url_private_download": f.url})
		}
		out["files"] = files
	}
	return out
}

// oauthAccess answers oauth.v2.access. Called with s.mu held.
func (s *Server) oauthAccess(w http.ResponseWriter, a args) {
	t, ok := s.codes[a.get("code")]
	if !ok || a.get("client_id") == "" || a.get("client_secret") == "" {
		fail(w, "invalid_code")
		return
	}
	delete(s.codes, a.get("code"))
	tt := t
	s.teams[t.ID] = &tt
	s.tokens[t.Token] = t.ID
	writeJSON(w, map[string]any{"ok": true, "access_token": t.Token, "token_type": "bot", "scope": "chat:write",
		"bot_user_id": t.BotUser, "app_id": "A0FAKEAPP1", "team": map[string]any{"id": t.ID, "name": t.Name},
		"enterprise": nil, "is_enterprise_install": false})
}

// serveUpload takes an external upload's bytes (multipart, as slack-go
// sends them, or raw).
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/upload/")
	h := sha256.New()
	var n int64
	var err error
	if mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, perr := mr.NextPart()
			if perr != nil {
				if !errors.Is(perr, io.EOF) {
					err = perr
				}
				break
			}
			if part.FormName() == "file" {
				var m int64
				m, err = io.Copy(h, part)
				n += m
			}
		}
	} else {
		n, err = io.Copy(h, r.Body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notifyLocked()
	u := s.uploads[id]
	if u == nil || err != nil {
		http.Error(w, "unknown upload", http.StatusNotFound)
		return
	}
	u.Received, u.SHA256 = int(n), hex.EncodeToString(h.Sum(nil))
	_, _ = io.WriteString(w, "OK - "+strconv.FormatInt(n, 10))
}

// serveFile serves an added file to its workspace's token; any other
// caller is redirected to the sign-in page (with redir set to the file's
// path), as files.slack.com does.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f, ok := s.files[r.URL.EscapedPath()]
	team := s.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	s.mu.Unlock()
	if !ok || team != f.team {
		http.Redirect(w, r, "/signin?redir="+url.QueryEscape(r.URL.Path), http.StatusFound)
		return
	}
	if f.started != nil {
		f.started <- f.id
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", f.contentType)
	_, _ = w.Write(f.data)
}

// StallResponses makes every later response_url post go unanswered: its
// id is reported on started, then it is held until its client gives up,
// unrecorded.
func (s *Server) StallResponses(started chan<- string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = started
}

// StallMethod makes every later call of method go unanswered: it is
// reported on started, then held until its client gives up, unrecorded.
func (s *Server) StallMethod(method string, started chan<- string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stallCall == nil {
		s.stallCall = map[string]chan<- string{}
	}
	s.stallCall[method] = started
}

// serveResponse records a response_url post.
func (s *Server) serveResponse(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	stalled := s.stalled
	s.mu.Unlock()
	if stalled != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)) // read: the server sees its client give up
		stalled <- strings.TrimPrefix(r.URL.Path, "/response/")
		<-r.Context().Done()
		return
	}
	var body map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notifyLocked()
	s.responses = append(s.responses, ResponsePost{ID: strings.TrimPrefix(r.URL.Path, "/response/"), Body: body})
	_, _ = io.WriteString(w, "ok")
}

// serveAuthorize is Slack's authorize page: it echoes the state it was
// given (a test reads it from the Location the install route answered).
func (s *Server) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "authorize "+r.URL.Query().Get("client_id"))
}
