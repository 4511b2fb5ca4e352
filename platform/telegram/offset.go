package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot/models"
)

// offsetGate holds each getUpdates long poll until every update of the
// previous answer was handled. The library asks for the next batch, with
// offset = the last update id + 1, as soon as it handed the last update to
// its worker; that offset confirms the update to Telegram, which never sends
// it again, while its delivery may still be running, and a crash then would
// lose it. Behind the gate the offset only moves past updates whose
// ingest ended: delivered (stored) or dropped on purpose. Updates of
// different chats are ingested side by side, so they end in any order.
// Every getUpdates answered with 200 also calls onReady: the library
// reports failures, never successes.
type offsetGate struct {
	base    http.RoundTripper
	onReady func()
	timeout time.Duration // bounds a call once it goes out

	mu      sync.Mutex
	handed  int64              // the highest update id of the last getUpdates answer
	reached int64              // the highest update id of that answer the worker took (handing)
	pending map[int64]struct{} // taken and not yet handled
	changed chan struct{}      // closed and replaced when an update is handled
}

func newOffsetGate(base http.RoundTripper, onReady func(), timeout time.Duration) *offsetGate {
	return &offsetGate{base: base, onReady: onReady, timeout: timeout, pending: make(map[int64]struct{}), changed: make(chan struct{})}
}

// RoundTrip implements http.RoundTripper. Each call is bounded by timeout
// from when it goes out: a getUpdates held at the gate, while a slow answer
// is still being handled, is not failed for the time it waited.
func (g *offsetGate) RoundTrip(r *http.Request) (*http.Response, error) {
	poll := strings.HasSuffix(r.URL.Path, "/getUpdates")
	if poll {
		if err := g.wait(r.Context()); err != nil {
			if r.Body != nil {
				_ = r.Body.Close()
			}
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.timeout)
	resp, err := g.base.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return resp, err
	}
	if !poll {
		resp.Body = cancelOnClose{resp.Body, cancel}
		return resp, nil
	}
	defer cancel()
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	// The answer's updates replace the previous answer's, all of which
	// were handled (wait): ids are compared within one answer only, since
	// after a week without updates Telegram numbers the next from a random,
	// possibly lower, value.
	if last := handedOut(body); last != 0 {
		g.mu.Lock()
		g.handed, g.reached = last, 0
		g.mu.Unlock()
	}
	if resp.StatusCode == http.StatusOK {
		g.onReady()
	}
	return resp, nil
}

// handedOut returns the highest update id of a getUpdates answer that the
// library hands to its worker, decoding it as the library does (whatever
// the HTTP status), so an answer the library rejects hands out nothing and
// cannot hold the next poll forever.
func handedOut(body []byte) int64 {
	var answer struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
	}
	var updates []*models.Update
	if json.Unmarshal(body, &answer) != nil || !answer.OK || json.Unmarshal(answer.Result, &updates) != nil {
		return 0
	}
	var last int64
	for _, u := range updates {
		last = max(last, u.ID)
	}
	return last
}

// wait returns once every update handed out was handled, or ctx is done.
func (g *offsetGate) wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		done, changed := g.reached >= g.handed && len(g.pending) == 0, g.changed
		g.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handing records that the worker took update id, before it is handled,
// and reports whether it is the last of the getUpdates answer it came in:
// the next poll is held until this answer is handled, so the highest id
// handed out is still this answer's.
func (g *offsetGate) handing(id int64) (last bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reached = max(g.reached, id)
	g.pending[id] = struct{}{}
	return id >= g.handed
}

// done records that update id was handled.
func (g *offsetGate) done(id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pending, id)
	close(g.changed)
	g.changed = make(chan struct{})
}

// handled returns the highest update id of the last answer the worker
// took, when every update it took was handled: an offset past it confirms
// them all, and none of the answer it did not take (ids rise within an
// answer). ok is false when nothing was taken or one is still pending.
func (g *offsetGate) handled() (last int64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reached, g.reached > 0 && len(g.pending) == 0
}

// reset forgets every update handed out: a new poll starts, and the last
// one's updates are ingested or given up.
func (g *offsetGate) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handed, g.reached = 0, 0
	clear(g.pending)
}

// cancelOnClose is a response body that ends its call's context once
// closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close implements io.Closer.
func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
