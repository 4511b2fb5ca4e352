package whatsapp

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

	"connector/platform"
)

// signatureHeader carries "sha256=<hex>", the HMAC-SHA256 of the raw body
// under the app secret.
const signatureHeader = "X-Hub-Signature-256"

// serveVerify answers Meta's subscription handshake, GET
// /whatsapp/webhook?hub.mode=subscribe&hub.verify_token=...&hub.challenge=...:
// the challenge when the mode is subscribe and the token matches (compared
// in constant time), 403 otherwise (400 without a challenge).
func (p *Platform) serveVerify(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sum := sha256.Sum256([]byte(q.Get("hub.verify_token")))
	if q.Get("hub.mode") != "subscribe" || subtle.ConstantTimeCompare(sum[:], p.verifySum[:]) != 1 {
		p.deps.Metrics.Dropped(platformName, "verify_refused")
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	challenge := q.Get("hub.challenge")
	if challenge == "" || len(challenge) > 256 {
		http.Error(w, "missing challenge", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write([]byte(challenge))
}

// serveWebhook handles POST /whatsapp/webhook: 401 for an
// X-Hub-Signature-256 missing or malformed (before the body is read) or
// not the body's HMAC-SHA256 under app_secret; 413 past
// max_webhook_bytes; 400 for a body that is not the webhook's JSON object;
// 503 when a message could not be stored (or its delivered mark, or a
// tapped prompt, looked up) or Run is not running (Meta retries; what got
// through is dropped then as a duplicate); else 200, once every message
// is stored (delivered into the sink) or dropped.
func (p *Platform) serveWebhook(w http.ResponseWriter, r *http.Request) {
	received := p.deps.Clock.Now()
	sig, ok := parseSignature(r.Header.Get(signatureHeader))
	if !ok { // refused before the body is read
		p.deps.Metrics.Dropped(platformName, "unauthorized")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, release, ok := platform.ReadBody(w, r, p.cfg.MaxWebhookBytes, "payload too large", p.deps.Metrics, platformName)
	if !ok {
		return
	}
	defer release()
	if !p.signed(body, sig) {
		p.deps.Metrics.Dropped(platformName, "unauthorized")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var pl payload
	if err := decodePayload(body, &pl); err != nil {
		p.deps.Metrics.Dropped(platformName, dropMalformed)
		http.Error(w, "malformed payload", http.StatusBadRequest)
		return
	}
	if err := p.ingest(r.Context(), &pl, received); err != nil {
		p.log.Warn("whatsapp webhook not stored; Meta will retry", "err", err)
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// parseSignature reads an X-Hub-Signature-256 value, "sha256=<hex>".
func parseSignature(header string) (sig [sha256.Size]byte, ok bool) {
	got, ok := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
	if !ok || len(got) != 2*sha256.Size {
		return sig, false
	}
	_, err := hex.Decode(sig[:], []byte(got))
	return sig, err == nil
}

// signed reports whether sig is the HMAC-SHA256 of body under the app
// secret, compared in constant time.
func (p *Platform) signed(body []byte, sig [sha256.Size]byte) bool {
	mac := hmac.New(sha256.New, []byte(p.cfg.AppSecret))
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), sig[:])
}
