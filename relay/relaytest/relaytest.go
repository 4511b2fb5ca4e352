// Package relaytest runs a relay.Server on loopback and plays the Hermes
// gateway's side of /relay, for tests and load tools.
//
// Client speaks exactly what the real gateway client (ws_transport.py)
// speaks: a fresh HMAC upgrade token on the Authorization header, one
// "\n"-terminated JSON frame per text message, non-ASCII escaped as \uXXXX
// the way Python's json.dumps does, and a reader that splits messages on
// "\n". Harness and Gateway wrap it for tests.
package relaytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/descriptor"
)

// Frame is one frame the connector sent, decoded by type.
type Frame struct {
	Type string
	// Raw is the frame's JSON line without its "\n".
	Raw []byte

	Descriptor descriptor.Descriptor // descriptor
	Event      contract.Event        // inbound
	BufferID   string                // inbound, passthrough_forward
	Forward    contract.Forward      // passthrough_forward
	RequestID  string                // outbound_result
	Result     contract.Result       // outbound_result
	SessionKey string                // interrupt_inbound
	ChatID     string                // interrupt_inbound
}

// Client is a gateway connection to a connector's /relay endpoint.
type Client struct {
	ws     *websocket.Conn
	frames chan *Frame
	done   chan struct{}
	// closed is closed by Close and CloseNow, so a reader blocked on a full
	// frames channel ends with the connection.
	closed    chan struct{}
	closeOnce sync.Once
	err       error // set before done is closed

	mu    sync.Mutex
	stash []Frame // frames read while waiting for another type
}

// Token mints the upgrade token the gateway sends: valid for 300 s from now.
func Token(gatewayID, secret string, now time.Time) string {
	return contract.MintToken(gatewayID, secret, now.Unix()+int64(contract.TokenTTL/time.Second))
}

// Dial connects to url (ws://host/relay) with the bearer token (none if "").
func Dial(ctx context.Context, url, token string) (*Client, error) {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, err
	}
	return newClient(ws), nil
}

// newClient starts reading a dialed connection.
func newClient(ws *websocket.Conn) *Client {
	ws.SetReadLimit(contract.MaxFrameBytes) // the gateway's websockets max_size
	c := &Client{ws: ws, frames: make(chan *Frame, 256), done: make(chan struct{}), closed: make(chan struct{})}
	go c.readLoop()
	return c
}

func (c *Client) readLoop() {
	defer close(c.done)
	var partial []byte
	for {
		_, msg, err := c.ws.Read(context.Background())
		if err != nil {
			c.err = err
			return
		}
		partial = append(partial, msg...)
		for {
			i := bytes.IndexByte(partial, '\n')
			if i < 0 {
				break
			}
			line := bytes.TrimSpace(partial[:i])
			partial = partial[i+1:]
			if len(line) == 0 {
				continue
			}
			f, err := decodeFrame(line)
			if err != nil {
				c.err = err
				return
			}
			select {
			case c.frames <- &f:
			case <-c.closed:
				c.err = net.ErrClosed
				return
			}
		}
		partial = append([]byte(nil), partial...)
	}
}

func decodeFrame(line []byte) (Frame, error) {
	var w struct {
		Type       string          `json:"type"`
		Descriptor json.RawMessage `json:"descriptor"`
		Event      json.RawMessage `json:"event"`
		BufferID   *string         `json:"bufferId"`
		Forward    json.RawMessage `json:"forward"`
		RequestID  string          `json:"requestId"`
		Result     json.RawMessage `json:"result"`
		SessionKey string          `json:"session_key"`
		ChatID     string          `json:"chat_id"`
	}
	if err := json.Unmarshal(line, &w); err != nil {
		return Frame{}, fmt.Errorf("relaytest: connector sent invalid JSON %q: %w", line, err)
	}
	f := Frame{Type: w.Type, Raw: append([]byte(nil), line...), RequestID: w.RequestID,
		SessionKey: w.SessionKey, ChatID: w.ChatID}
	if w.BufferID != nil {
		f.BufferID = *w.BufferID
	}
	for _, part := range []struct {
		raw json.RawMessage
		v   any
	}{{w.Descriptor, &f.Descriptor}, {w.Event, &f.Event}, {w.Forward, &f.Forward}, {w.Result, &f.Result}} {
		if len(part.raw) == 0 {
			continue
		}
		if err := json.Unmarshal(part.raw, part.v); err != nil {
			return Frame{}, fmt.Errorf("relaytest: %s frame: %w", w.Type, err)
		}
	}
	return f, nil
}

// Send writes frame as the gateway does: Python json.dumps formatting with
// ensure_ascii, one frame per message, "\n"-terminated.
func (c *Client) Send(ctx context.Context, frame any) error {
	b, err := PythonJSON(frame)
	if err != nil {
		return err
	}
	return c.SendRaw(ctx, append(b, '\n'))
}

// SendRaw writes msg as one text message, unchanged.
func (c *Client) SendRaw(ctx context.Context, msg []byte) error {
	return c.ws.Write(ctx, websocket.MessageText, msg)
}

// Next returns the next frame of one of the given types (any type when none
// is given). Frames of other types read meanwhile are kept, in order, for
// later calls.
func (c *Client) Next(ctx context.Context, types ...string) (Frame, error) {
	return c.NextMatch(ctx, func(f Frame) bool {
		return len(types) == 0 || slices.Contains(types, f.Type)
	}, fmt.Sprint(types))
}

// NextMatch returns the next frame for which match is true; what describes
// the wait in errors. Other frames read meanwhile are kept for later calls.
func (c *Client) NextMatch(ctx context.Context, match func(Frame) bool, what string) (Frame, error) {
	c.mu.Lock()
	for i, f := range c.stash {
		if match(f) {
			c.stash = slices.Delete(c.stash, i, i+1)
			c.mu.Unlock()
			return f, nil
		}
	}
	c.mu.Unlock()
	for {
		var fp *Frame
		select {
		case fp = <-c.frames:
		case <-c.done:
			select {
			case fp = <-c.frames: // read before the connection ended
			default:
				if c.err == nil {
					return Frame{}, errors.New("relaytest: connection closed")
				}
				return Frame{}, c.err
			}
		case <-ctx.Done():
			return Frame{}, fmt.Errorf("relaytest: waiting for %s: %w", what, ctx.Err())
		}
		f := *fp
		if match(f) {
			return f, nil
		}
		c.mu.Lock()
		c.stash = append(c.stash, f)
		c.mu.Unlock()
	}
}

// Closed waits until the connector closes the connection and returns its
// close status and reason (-1 if it closed without a close frame).
func (c *Client) Closed(ctx context.Context) (websocket.StatusCode, string, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		return -1, "", ctx.Err()
	}
	var ce websocket.CloseError
	if errors.As(c.err, &ce) {
		return ce.Code, ce.Reason, nil
	}
	return -1, "", nil
}

// Hello sends hello and returns the descriptor that answers it.
func (c *Client) Hello(ctx context.Context, platform, botID string) (descriptor.Descriptor, error) {
	if err := c.Send(ctx, ordered{{"type", "hello"}, {"platform", platform}, {"botId", botID}}); err != nil {
		return descriptor.Descriptor{}, err
	}
	f, err := c.Next(ctx, contract.TypeDescriptor)
	return f.Descriptor, err
}

// Outbound sends an outbound frame (tagged with platform unless it is "")
// and waits for its result.
func (c *Client) Outbound(ctx context.Context, platform string, action map[string]any) (contract.Result, error) {
	id := NewRequestID()
	frame := ordered{{"type", "outbound"}, {"requestId", id}, {"action", action}}
	if platform != "" {
		frame = append(frame, kv{"platform", platform})
	}
	if err := c.Send(ctx, frame); err != nil {
		return contract.Result{}, err
	}
	f, err := c.NextMatch(ctx, func(f Frame) bool {
		return f.Type == contract.TypeOutboundResult && f.RequestID == id
	}, "outbound_result "+id)
	return f.Result, err
}

// Ack sends inbound_ack for bufferID.
func (c *Client) Ack(ctx context.Context, bufferID string) error {
	return c.Send(ctx, ordered{{"type", "inbound_ack"}, {"bufferId", bufferID}})
}

// Close closes the connection normally (1000), as a gateway shutting down does.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.ws.Close(websocket.StatusNormalClosure, "")
}

// CloseNow drops the connection without a close handshake, like a crash.
func (c *Client) CloseNow() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.ws.CloseNow()
}

// NewRequestID returns a requestId as the gateway makes them: 32 lowercase
// hex characters.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// kv is one key of an ordered JSON object.
type kv struct {
	K string
	V any
}

// ordered is a JSON object that keeps its key order, as Python dicts do.
type ordered []kv

// PythonJSON encodes v the way Python's json.dumps does by default:
// separators ", " and ": ", every non-ASCII character escaped as \uXXXX
// (astral ones as surrogate pairs). Maps are written in sorted key order.
func PythonJSON(v any) ([]byte, error) {
	var b strings.Builder
	if err := writePython(&b, v); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

func writePython(b *strings.Builder, v any) error {
	switch x := v.(type) {
	case ordered:
		b.WriteByte('{')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writePythonString(b, e.K)
			b.WriteString(": ")
			if err := writePython(b, e.V); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case map[string]any:
		o := make(ordered, 0, len(x))
		for k, v := range x {
			o = append(o, kv{k, v})
		}
		slices.SortFunc(o, func(a, b kv) int { return strings.Compare(a.K, b.K) })
		return writePython(b, o)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writePython(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case string:
		writePythonString(b, x)
	default:
		// Numbers, bools, null and other Go values: encoding/json spells them
		// like Python does; re-encode nested strings through the generic path.
		raw, err := json.Marshal(x)
		if err != nil {
			return err
		}
		var generic any
		if err := json.Unmarshal(raw, &generic); err != nil {
			return err
		}
		switch generic.(type) {
		case map[string]any, []any, string:
			return writePython(b, generic)
		}
		b.Write(raw)
	}
	return nil
}

func writePythonString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || (r >= 0x7f && r <= 0xffff):
			fmt.Fprintf(b, `\u%04x`, r)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			b.WriteString(`\u` + strconv.FormatInt(int64(hi), 16) + `\u` + strconv.FormatInt(int64(lo), 16))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
