package slacktest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Sign returns Slack's v0 signature of body sent at ts with secret.
func Sign(secret string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:", ts.Unix())
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// SignedRequest is a POST of body to url as Slack sends it, signed with
// secret at ts. contentType is application/json for events,
// application/x-www-form-urlencoded for interactions and commands.
func SignedRequest(url, secret string, ts time.Time, contentType string, body []byte) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("X-Slack-Signature", Sign(secret, ts, body))
	return req
}

// Envelope is an Events API event_callback envelope of event, delivered
// for the app's installation in team whose bot user is bot, dispatched
// now (event_time, as Slack sets it).
func Envelope(team, bot, eventID string, event map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"token": "fake-verification-token", "team_id": team, "api_app_id": "A0FAKEAPP1", "event": event,
		"type": "event_callback", "event_id": eventID, "event_time": time.Now().Unix(),
		"authorizations":        []any{map[string]any{"enterprise_id": nil, "team_id": team, "user_id": bot, "is_bot": true}},
		"is_ext_shared_channel": false,
	})
	return b
}

// MessageEvent is a message event from user in channel (a D channel is a DM),
// with ts; thread is its thread's root ("" for a top-level message).
func MessageEvent(team, channel, user, ts, thread, text string) map[string]any {
	ev := map[string]any{
		"client_msg_id": "m-" + ts, "type": "message", "text": text, "user": user, "ts": ts, "team": team,
		"channel": channel, "event_ts": ts, "channel_type": "channel",
	}
	if len(channel) > 0 && channel[0] == 'D' {
		ev["channel_type"] = "im"
	}
	if thread != "" {
		ev["thread_ts"] = thread
	}
	return ev
}

// triggers numbers the slash commands Command makes: each has a
// trigger_id of its own, as Slack gives every invocation.
var triggers atomic.Uint64

// Command is a slash command's form body.
func Command(team, channel, user, command, text, responseURL string) []byte {
	return []byte(url.Values{
		"token": {"fake-verification-token"}, "team_id": {team}, "channel_id": {channel}, "user_id": {user},
		"user_name": {"u"}, "command": {command}, "text": {text}, "response_url": {responseURL},
		"trigger_id": {"1.2." + strconv.FormatUint(triggers.Add(1), 10)}, "api_app_id": {"A0FAKEAPP1"},
	}.Encode())
}

// Press is a block_actions payload of user of workspace team pressing the
// button actionID (label) on message ts of channel, in thread ("" for
// none), as the interactions route's form body.
func Press(team, channel, user, ts, thread, actionID, label string) []byte {
	return PressFrom(team, team, channel, user, ts, thread, actionID, label)
}

// PressFrom is Press by a user of workspace userTeam (user.team_id) in a
// payload whose team is team: in a Slack Connect channel they differ when
// the presser is of another workspace than the one Slack names.
func PressFrom(team, userTeam, channel, user, ts, thread, actionID, label string) []byte {
	container := map[string]any{"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": false}
	if thread != "" {
		container["thread_ts"] = thread
	}
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "team": map[string]any{"id": team, "domain": "fake"},
		"user": map[string]any{"id": user, "username": "u", "team_id": userTeam}, "api_app_id": "A0FAKEAPP1",
		"container": container, "channel": map[string]any{"id": channel, "name": "c"},
		"message":      map[string]any{"type": "message", "ts": ts, "thread_ts": thread, "text": "prompt"},
		"response_url": "https://hooks.slack.com/actions/x", "trigger_id": "1.2.3",
		"actions": []any{map[string]any{"action_id": actionID, "block_id": "b", "type": "button",
			"text": map[string]any{"type": "plain_text", "text": label}, "value": "v", "action_ts": "1768490001.000200"}},
	})
	return []byte(url.Values{"payload": {string(payload)}}.Encode())
}

// sockets is the fake's Socket Mode: the connections apps.connections.open
// sends clients to, and the envelopes they were sent and acknowledged.
type sockets struct {
	s *Server

	mu      sync.Mutex
	conns   map[*websocket.Conn]bool
	dials   int
	pending []envelopeOut // sent and not acknowledged: sent again on a new connection
	acks    map[string]json.RawMessage
	nextID  int
}

type envelopeOut struct {
	id   string
	data []byte
}

func newSockets(s *Server) *sockets {
	return &sockets{s: s, conns: map[*websocket.Conn]bool{}, acks: map[string]json.RawMessage{}}
}

// pingEvery is how often the fake pings a client, as Slack does.
const pingEvery = 5 * time.Second

func (k *sockets) serve(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true}) // the socketmode client sends an Origin
	if err != nil {
		return
	}
	ctx := r.Context()
	hello := `{"type":"hello","num_connections":1,"debug_info":{"host":"fake","approximate_connection_time":3600},"connection_info":{"app_id":"A0FAKEAPP1"}}`
	if err := c.Write(ctx, websocket.MessageText, []byte(hello)); err != nil {
		_ = c.CloseNow()
		return
	}
	k.mu.Lock()
	k.conns[c] = true
	k.dials++
	resend := append([]envelopeOut(nil), k.pending...)
	k.mu.Unlock()
	k.notify()
	defer func() {
		k.mu.Lock()
		delete(k.conns, c)
		k.mu.Unlock()
		_ = c.CloseNow()
		k.notify()
	}()
	for _, e := range resend {
		if c.Write(ctx, websocket.MessageText, e.data) != nil {
			return
		}
	}
	go func() {
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pctx, cancel := context.WithTimeout(ctx, pingEvery)
				err := c.Ping(pctx)
				cancel()
				if err != nil {
					return
				}
			}
		}
	}()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		k.mu.Lock()
		k.acks[ack.EnvelopeID] = ack.Payload
		for i, e := range k.pending {
			if e.id == ack.EnvelopeID {
				k.pending = append(k.pending[:i], k.pending[i+1:]...)
				break
			}
		}
		k.mu.Unlock()
		k.notify()
	}
}

func (k *sockets) notify() {
	k.s.mu.Lock()
	k.s.notifyLocked()
	k.s.mu.Unlock()
}

func (k *sockets) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for c := range k.conns {
		_ = c.Close(websocket.StatusGoingAway, "fake closing")
	}
}

// WaitSocket waits until n Socket Mode connections were made, and one is
// open.
func (s *Server) WaitSocket(ctx context.Context, n int) error {
	_, err := waitFor(ctx, s, func() (struct{}, bool) {
		s.sockets.mu.Lock()
		defer s.sockets.mu.Unlock()
		return struct{}{}, s.sockets.dials >= n && len(s.sockets.conns) > 0
	}, fmt.Sprintf("socket mode connection %d", n))
	return err
}

// OpenSockets counts the Socket Mode connections open now.
func (s *Server) OpenSockets() int {
	s.sockets.mu.Lock()
	defer s.sockets.mu.Unlock()
	return len(s.sockets.conns)
}

// PushEvent sends payload as an envelope of typ (events_api, interactive,
// slash_commands) to an open Socket Mode connection and returns its id.
// Until acknowledged it is sent again on every new connection, as Slack
// redelivers.
func (s *Server) PushEvent(ctx context.Context, typ string, payload []byte) (string, error) {
	k := s.sockets
	k.mu.Lock()
	k.nextID++
	id := fmt.Sprintf("env-%d", k.nextID)
	data, _ := json.Marshal(map[string]any{"envelope_id": id, "type": typ, "payload": json.RawMessage(payload),
		"accepts_response_payload": typ != "events_api", "retry_attempt": 0})
	k.pending = append(k.pending, envelopeOut{id: id, data: data})
	var conn *websocket.Conn
	for c := range k.conns {
		conn = c
		break
	}
	k.mu.Unlock()
	if conn == nil {
		return id, nil // sent on the next connection
	}
	if err := conn.Write(ctx, websocket.MessageText, data); err != nil && !errors.Is(err, context.Canceled) {
		return id, nil // the connection died: resent on the next one
	}
	return id, nil
}

// WaitAck waits until envelope id is acknowledged and returns the ack's
// payload.
func (s *Server) WaitAck(ctx context.Context, id string) (json.RawMessage, error) {
	return waitFor(ctx, s, func() (json.RawMessage, bool) {
		s.sockets.mu.Lock()
		defer s.sockets.mu.Unlock()
		p, ok := s.sockets.acks[id]
		return p, ok
	}, "the ack of "+id)
}

// Acked reports whether envelope id was acknowledged.
func (s *Server) Acked(id string) bool {
	s.sockets.mu.Lock()
	defer s.sockets.mu.Unlock()
	_, ok := s.sockets.acks[id]
	return ok
}
