package telegram

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"time"

	"github.com/go-telegram/bot/models"

	"connector/platform"
)

// secretHeader carries setWebhook's secret_token on every delivery.
const secretHeader = "X-Telegram-Bot-Api-Secret-Token"

// The claims of a webhook update with several instances (handle).
const (
	// webhookPending outlasts an update's handling (its chat's turn, a
	// file re-hosted within mediaDownloadTimeout, the store's write): a
	// retry that comes meanwhile is answered 503. It is also how long a
	// killed instance's claim holds the update back.
	webhookPending = mediaDownloadTimeout + 30*time.Second
	// webhookDedupeWindow is how long a handled update_id is remembered
	// across instances: Telegram keeps retrying an unconfirmed update for
	// up to 24 hours.
	webhookDedupeWindow = 24 * time.Hour
)

// serveWebhook handles POST /telegram/webhook; the package doc lists its
// answers. The update is delivered before the answer, and the Bot API
// server sends a chat's next update only after the previous one was
// answered (its webhook queues updates per chat), so a chat's updates stay
// in order.
func (p *Platform) serveWebhook(w http.ResponseWriter, r *http.Request) {
	received := p.deps.Clock.Now()
	if !p.secretOK(r.Header.Get(secretHeader)) {
		p.deps.Metrics.Dropped(platformName, "unauthorized")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, release, ok := platform.ReadBody(w, r, p.cfg.MaxWebhookBytes, "update too large", p.deps.Metrics, platformName)
	if !ok {
		return
	}
	defer release()
	var u models.Update
	if err := decodeUpdate(body, &u); err != nil {
		p.drop(dropMalformed, 0, 0)
		http.Error(w, "malformed update", http.StatusBadRequest)
		return
	}
	if err := p.handle(r.Context(), &u, received); err != nil {
		if !errors.Is(err, platform.ErrBusy) {
			p.log.Warn("telegram webhook update not delivered; Telegram will retry", "update_id", u.ID, "err", err)
		}
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
