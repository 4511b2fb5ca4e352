// Package whatsapptest is a fake WhatsApp Cloud API on loopback, speaking
// the Graph API's real JSON (POST /{version}/{phone-number-id}/messages,
// POST /{version}/{phone-number-id}/media, GET /{version}/{media-id} and the
// signed download URL it answers), and builds Meta's webhook payloads with
// their X-Hub-Signature-256, for the tests of platform/whatsapp, the
// connector binary and relaybench.
package whatsapptest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Version is the Graph API version the fake serves (the connector's
// default).
const Version = "v20.0"

// Sent is one message the fake accepted on /messages.
type Sent struct {
	// PhoneNumberID is the business number it was sent from.
	PhoneNumberID string
	// To is the recipient's wa_id; Type the message type.
	To, Type string
	// ID is the wamid the fake answered.
	ID string
	// Body is the whole request body.
	Body map[string]any
}

// Block returns the message's typed block (Body[Type]) as an object.
func (s Sent) Block() map[string]any {
	b, _ := s.Body[s.Type].(map[string]any)
	return b
}

// Context returns the message's context.message_id, "" when none.
func (s Sent) Context() string {
	c, _ := s.Body["context"].(map[string]any)
	id, _ := c["message_id"].(string)
	return id
}

// Read is one mark-as-read call.
type Read struct {
	PhoneNumberID, MessageID string
	Typing                   bool
}

// Media is an uploaded or inbound media object.
type Media struct {
	Data []byte
	MIME string
	// Filename is the uploaded part's filename.
	Filename string
	// PhoneNumberID is the number that uploaded it ("" for inbound media).
	PhoneNumberID string
	// Unsized leaves file_size out of the media lookup's answer.
	Unsized bool
}

// Server is the fake Graph API.
type Server struct {
	// URL is the base URL to configure as whatsapp.api_url.
	URL string
	srv *httptest.Server

	token string

	mu       sync.Mutex
	sent     []Sent
	reads    []Read
	media    map[string]Media // id -> object (inbound and uploaded)
	closed   map[string]bool  // wa_ids whose service window is closed
	failures []GraphError     // answered to the next /messages calls
	next     int
	changed  chan struct{}
}

// GraphError is an error answer the fake gives: the HTTP status and the
// Graph error's code and message.
type GraphError struct {
	Status  int
	Code    int
	Message string
}

// New starts a fake that accepts the bearer token token; it stops when
// the test ends (or the benchmark driver closes).
func New(t interface{ Cleanup(func()) }, token string) *Server {
	s := &Server{token: token, media: map[string]Media{}, closed: map[string]bool{}, changed: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// AddMedia makes inbound media id available for lookup and download.
func (s *Server) AddMedia(id, mimeType string, data []byte) {
	s.PutMedia(id, Media{Data: data, MIME: mimeType})
}

// PutMedia makes inbound media id available for lookup and download, as m
// describes it.
func (s *Server) PutMedia(id string, m Media) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.media[id] = m
}

// Media returns the object under id (uploaded or inbound).
func (s *Server) Media(id string) (Media, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.media[id]
	return m, ok
}

// CloseWindow makes every later message to waID fail with 131047, as when
// the user last wrote more than 24 hours ago.
func (s *Server) CloseWindow(waID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed[waID] = true
}

// Fail queues error answers for the next /messages calls, in order; a
// zero GraphError lets its call through.
func (s *Server) Fail(errs ...GraphError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, errs...)
}

// Sent returns the messages accepted so far.
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sent(nil), s.sent...)
}

// Reads returns the mark-as-read calls so far.
func (s *Server) Reads() []Read {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Read(nil), s.reads...)
}

// Uploads counts the media uploaded from the numbers.
func (s *Server) Uploads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.media {
		if m.PhoneNumberID != "" {
			n++
		}
	}
	return n
}

// WaitSent waits until n messages were accepted and returns them.
func (s *Server) WaitSent(ctx context.Context, n int) ([]Sent, error) {
	for {
		s.mu.Lock()
		sent, changed := append([]Sent(nil), s.sent...), s.changed
		s.mu.Unlock()
		if len(sent) >= n {
			return sent, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return sent, fmt.Errorf("waiting for %d messages, %d sent: %w", n, len(sent), ctx.Err())
		}
	}
}

// notify wakes waiters; called with mu held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		writeError(w, GraphError{Status: http.StatusUnauthorized, Code: 190, Message: "Invalid OAuth access token - Cannot parse access token"})
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 2 && parts[0] == "download" && r.Method == http.MethodGet:
		s.download(w, parts[1])
	case len(parts) == 3 && parts[0] == Version && parts[2] == "messages" && r.Method == http.MethodPost:
		s.messages(w, r, parts[1])
	case len(parts) == 3 && parts[0] == Version && parts[2] == "media" && r.Method == http.MethodPost:
		s.upload(w, r, parts[1])
	case len(parts) == 2 && parts[0] == Version && r.Method == http.MethodGet:
		s.lookup(w, parts[1])
	default:
		writeError(w, GraphError{Status: http.StatusBadRequest, Code: 100, Message: "Unsupported request - method type: " + strings.ToLower(r.Method)})
	}
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request, phone string) {
	var body map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil || body["messaging_product"] != "whatsapp" {
		writeError(w, GraphError{Status: http.StatusBadRequest, Code: 100, Message: "(#100) The parameter messaging_product is required."})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if body["status"] == "read" {
		id, _ := body["message_id"].(string)
		_, typing := body["typing_indicator"]
		s.reads = append(s.reads, Read{PhoneNumberID: phone, MessageID: id, Typing: typing})
		s.notify()
		writeJSON(w, map[string]any{"success": true})
		return
	}
	to, _ := body["to"].(string)
	typ, _ := body["type"].(string)
	if _, ok := body[typ].(map[string]any); !ok || to == "" {
		writeError(w, GraphError{Status: http.StatusBadRequest, Code: 100, Message: "(#100) Invalid parameter"})
		return
	}
	if len(s.failures) > 0 {
		f := s.failures[0]
		s.failures = s.failures[1:]
		if f != (GraphError{}) {
			writeError(w, f)
			return
		}
	}
	if s.closed[to] {
		writeJSONStatus(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"message": "(#131047) Re-engagement message", "type": "OAuthException", "code": 131047,
			"error_data": map[string]any{"messaging_product": "whatsapp",
				"details": "Message failed to send because more than 24 hours have passed since the customer last replied to this number."},
			"fbtrace_id": "AbCdEf"}})
		return
	}
	if typ == "interactive" || typ == "reaction" {
		if block := body[typ].(map[string]any); !validBlock(typ, block) {
			writeError(w, GraphError{Status: http.StatusBadRequest, Code: 131009, Message: "(#131009) Parameter value is not valid"})
			return
		}
	}
	s.next++
	id := fmt.Sprintf("wamid.fake%06d", s.next)
	s.sent = append(s.sent, Sent{PhoneNumberID: phone, To: to, Type: typ, ID: id, Body: body})
	s.notify()
	writeJSON(w, map[string]any{"messaging_product": "whatsapp",
		"contacts": []any{map[string]any{"input": to, "wa_id": to}}, "messages": []any{map[string]any{"id": id}}})
}

// validBlock checks an interactive or reaction block against Meta's limits.
func validBlock(typ string, b map[string]any) bool {
	if typ == "reaction" {
		_, ok := b["message_id"].(string)
		return ok
	}
	body, _ := b["body"].(map[string]any)
	text, _ := body["text"].(string)
	if text == "" || len([]rune(text)) > 1024 {
		return false
	}
	action, _ := b["action"].(map[string]any)
	switch b["type"] {
	case "button":
		buttons, _ := action["buttons"].([]any)
		if len(buttons) == 0 || len(buttons) > 3 {
			return false
		}
		for _, x := range buttons {
			reply, _ := x.(map[string]any)["reply"].(map[string]any)
			if title, _ := reply["title"].(string); title == "" || len([]rune(title)) > 20 {
				return false
			}
		}
		return true
	case "list":
		sections, _ := action["sections"].([]any)
		if len(sections) != 1 {
			return false
		}
		rows, _ := sections[0].(map[string]any)["rows"].([]any)
		if len(rows) == 0 || len(rows) > 10 {
			return false
		}
		for _, x := range rows {
			row, _ := x.(map[string]any)
			title, _ := row["title"].(string)
			desc, _ := row["description"].(string)
			if title == "" || len([]rune(title)) > 24 || len([]rune(desc)) > 72 {
				return false
			}
		}
		return true
	}
	return false
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request, phone string) {
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/form-data" {
		writeError(w, GraphError{Status: http.StatusBadRequest, Code: 100, Message: "(#100) Param file must be a file with one of the following types"})
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	fields := map[string]string{}
	var file Media
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeError(w, GraphError{Status: http.StatusBadRequest, Code: 100, Message: "malformed multipart body"})
			return
		}
		data, _ := io.ReadAll(io.LimitReader(part, 200<<20))
		if part.FormName() == "file" {
			file = Media{Data: data, MIME: part.Header.Get("Content-Type"), Filename: part.FileName(), PhoneNumberID: phone}
			continue
		}
		fields[part.FormName()] = string(data)
	}
	if fields["messaging_product"] != "whatsapp" || file.Data == nil || fields["type"] == "" {
		writeError(w, GraphError{Status: http.StatusBadRequest, Code: 100, Message: "(#100) The parameter messaging_product is required."})
		return
	}
	s.mu.Lock()
	s.next++
	id := fmt.Sprintf("%d", 900000000+s.next)
	s.media[id] = file
	s.notify()
	s.mu.Unlock()
	writeJSON(w, map[string]any{"id": id})
}

func (s *Server) lookup(w http.ResponseWriter, id string) {
	s.mu.Lock()
	m, ok := s.media[id]
	s.mu.Unlock()
	if !ok {
		writeError(w, GraphError{Status: http.StatusBadRequest, Code: 100, Message: "(#100) Unsupported get request. Object with ID '" + id + "' does not exist"})
		return
	}
	sum := sha256.Sum256(m.Data)
	answer := map[string]any{"url": s.URL + "/download/" + id, "mime_type": m.MIME, "sha256": hex.EncodeToString(sum[:]),
		"file_size": len(m.Data), "id": id, "messaging_product": "whatsapp"}
	if m.Unsized {
		delete(answer, "file_size")
	}
	writeJSON(w, answer)
}

func (s *Server) download(w http.ResponseWriter, id string) {
	s.mu.Lock()
	m, ok := s.media[id]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, nil)
		return
	}
	w.Header().Set("Content-Type", m.MIME)
	_, _ = w.Write(m.Data)
}

func writeError(w http.ResponseWriter, e GraphError) {
	writeJSONStatus(w, e.Status, map[string]any{"error": map[string]any{"message": e.Message, "type": "OAuthException", "code": e.Code, "fbtrace_id": "AbCdEf"}})
}

func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Sign returns the X-Hub-Signature-256 value of body under appSecret.
func Sign(appSecret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(appSecret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// SignedRequest is a webhook POST of body to url, signed under appSecret.
func SignedRequest(url, appSecret string, body []byte) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hub-Signature-256", Sign(appSecret, body))
	return req
}

// Business is the business number a payload reached.
type Business struct {
	PhoneNumberID, DisplayNumber string
}

// Message is the payload of one inbound message from waID (named name,
// "" for no contacts entry) to b: msg is the message object without from
// (it is set to waID).
func Message(b Business, waID, name string, msg map[string]any) []byte {
	m := map[string]any{"from": waID, "timestamp": "1768480800"}
	for k, v := range msg {
		m[k] = v
	}
	value := map[string]any{"messaging_product": "whatsapp", "metadata": b.metadata(), "messages": []any{m}}
	if name != "" {
		value["contacts"] = []any{map[string]any{"profile": map[string]any{"name": name}, "wa_id": waID}}
	}
	return envelope(value)
}

// Text is the payload of a text message.
func Text(b Business, waID, name, wamid, text string) []byte {
	return Message(b, waID, name, map[string]any{"id": wamid, "type": "text", "text": map[string]any{"body": text}})
}

// Tap is the payload of a tap on an interactive message: a button_reply,
// or a list_reply when list is set; replyTo is the interactive message's
// wamid.
func Tap(b Business, waID, name, wamid, replyTo, id, title string, list bool) []byte {
	kind := "button_reply"
	if list {
		kind = "list_reply"
	}
	return Message(b, waID, name, map[string]any{"id": wamid, "type": "interactive",
		"context":     map[string]any{"from": b.DisplayNumber, "id": replyTo},
		"interactive": map[string]any{"type": kind, kind: map[string]any{"id": id, "title": title}}})
}

// Status is the payload of a delivery status of message wamid to waID;
// a failed status carries errorCode.
func Status(b Business, waID, wamid, status string, errorCode int) []byte {
	return statusOf(b, waID, wamid, "", status, errorCode)
}

// StatusOf is the payload of a delivery status of message s, carrying
// the biz_opaque_callback_data s was sent with, as Meta echoes it.
func StatusOf(b Business, s Sent, status string, errorCode int) []byte {
	callback, _ := s.Body["biz_opaque_callback_data"].(string)
	return statusOf(b, s.To, s.ID, callback, status, errorCode)
}

func statusOf(b Business, waID, wamid, callback, status string, errorCode int) []byte {
	st := map[string]any{"id": wamid, "status": status, "timestamp": "1768481400", "recipient_id": waID}
	if callback != "" {
		st["biz_opaque_callback_data"] = callback
	}
	if status == "failed" {
		st["errors"] = []any{map[string]any{"code": errorCode, "title": "Message undeliverable"}}
	}
	return envelope(map[string]any{"messaging_product": "whatsapp", "metadata": b.metadata(), "statuses": []any{st}})
}

func (b Business) metadata() map[string]any {
	return map[string]any{"display_phone_number": b.DisplayNumber, "phone_number_id": b.PhoneNumberID}
}

func envelope(value map[string]any) []byte {
	body, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": []any{map[string]any{
		"id": "102290129340398", "changes": []any{map[string]any{"value": value, "field": "messages"}}}}})
	return body
}
