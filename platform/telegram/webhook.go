package telegram

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"sync"

	"github.com/go-telegram/bot/models"
)

// secretHeader carries setWebhook's secret_token on every delivery.
const secretHeader = "X-Telegram-Bot-Api-Secret-Token"

// bodyPool recycles webhook body buffers.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody keeps unusually large buffers out of the pool.
const maxPooledBody = 64 << 10

// serveWebhook handles POST /telegram/webhook; the package doc lists its
// answers. The update is delivered before the answer, and the Bot API
// server sends a chat's next update only after the previous one was
// answered (its webhook queues updates per chat), so a chat's updates stay
// in order.
func (p *Platform) serveWebhook(w http.ResponseWriter, r *http.Request) {
	received := p.clock.Now()
	if !p.secretOK(r.Header.Get(secretHeader)) {
		p.metrics.Dropped(platformName, "unauthorized")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledBody {
			bodyPool.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, p.cfg.MaxWebhookBytes)); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			p.metrics.Dropped(platformName, "oversized")
			http.Error(w, "update too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	var u models.Update
	if err := decodeUpdate(buf.Bytes(), &u); err != nil {
		p.drop(dropMalformed, 0, 0)
		http.Error(w, "malformed update", http.StatusBadRequest)
		return
	}
	if err := p.handle(r.Context(), &u, received); err != nil {
		p.log.Warn("telegram webhook update not delivered; Telegram will retry", "update_id", u.ID, "err", err)
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// secretOK compares the header with the webhook secret in constant time
// (hashing both first, so not even the length leaks).
func (p *Platform) secretOK(got string) bool {
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], p.secretSum[:]) == 1
}
