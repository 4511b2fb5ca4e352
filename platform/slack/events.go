package slack

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/slack-go/slack"

	"connector/platform"
)

// This file serves the signed HTTP routes Slack calls. Every request is
// verified first: X-Slack-Request-Timestamp within signatureWindow of the
// connector's clock, then X-Slack-Signature, the v0 HMAC-SHA256 of
// "v0:<timestamp>:<body>" with the signing secret (or, during its
// rotation, previous_signing_secret), compared in constant time
// (slack.SecretsVerifier). The answers are docs/security.md's: a 200 is
// written only once the event is stored, or its request is in the durable
// intake (intake.go); 503 when it was not, so that Slack retries.

// signatureWindow is how far a request's timestamp may be from the
// connector's clock.
const signatureWindow = 5 * time.Minute

// Request headers Slack sets.
const (
	headerTimestamp = "X-Slack-Request-Timestamp"
	headerRetryNum  = "X-Slack-Retry-Num"
)

// verified reads r's body and checks its signature; it answers the
// request itself (and returns ok false) when the check fails. release
// returns the body's buffer.
func (p *Platform) verified(w http.ResponseWriter, r *http.Request) (body []byte, release func(), ok bool) {
	ts, err := strconv.ParseInt(r.Header.Get(headerTimestamp), 10, 64)
	if err != nil || p.clock.Now().Sub(time.Unix(ts, 0)).Abs() > signatureWindow {
		p.metrics.Dropped(platformName, "unauthorized")
		http.Error(w, "stale or missing request timestamp", http.StatusUnauthorized)
		return nil, nil, false
	}
	sv, err := slack.NewSecretsVerifier(r.Header, p.cfg.SigningSecret)
	if err != nil {
		p.metrics.Dropped(platformName, "unauthorized")
		http.Error(w, "missing or malformed signature", http.StatusUnauthorized)
		return nil, nil, false
	}
	body, release, ok = platform.ReadBody(w, r, p.cfg.MaxEventBytes, "request too large", p.metrics, platformName)
	if !ok {
		return nil, nil, false
	}
	if !signed(sv, r.Header, body, p.cfg.PreviousSigningSecret) {
		release()
		p.metrics.Dropped(platformName, "unauthorized")
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return nil, nil, false
	}
	return body, release, true
}

// signed reports whether body's signature is sv's (the signing secret's)
// or, when set, previous's (the secret being rotated out); each compared
// in constant time.
func signed(sv slack.SecretsVerifier, header http.Header, body []byte, previous string) bool {
	if _, err := sv.Write(body); err == nil && sv.Ensure() == nil {
		return true
	}
	if previous == "" {
		return false
	}
	old, err := slack.NewSecretsVerifier(header, previous)
	if err != nil {
		return false
	}
	_, err = old.Write(body)
	return err == nil && old.Ensure() == nil
}

// answer writes the status of an ingest error: 200 for nil, 503 when the
// event was not stored.
func (p *Platform) answer(w http.ResponseWriter, err error, what string) {
	if err == nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	if !errors.Is(err, platform.ErrBusy) {
		p.log.Warn("slack "+what+" not stored; Slack will retry", "err", p.errorText(err))
	}
	http.Error(w, "try again later", http.StatusServiceUnavailable)
}

// serveEvents handles POST /slack/events (the Events API).
func (p *Platform) serveEvents(w http.ResponseWriter, r *http.Request) {
	received := p.clock.Now()
	body, release, ok := p.verified(w, r)
	if !ok {
		return
	}
	defer release()
	var env envelope
	if err := decodeEnvelope(body, &env); err != nil {
		p.drop(dropMalformed, "")
		http.Error(w, "malformed event", http.StatusBadRequest)
		return
	}
	switch env.Type {
	case "url_verification":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": env.Challenge})
		return
	case "event_callback":
	default:
		p.notCallback(&env)
		w.WriteHeader(http.StatusOK)
		return
	}
	if n := r.Header.Get(headerRetryNum); n != "" {
		p.log.Debug("slack event retried", "event_id", env.EventID, "retry", n, "reason", r.Header.Get("X-Slack-Retry-Reason"))
	}
	chat, tenant, slow, job := p.envelopeJob(&env, received, true)
	if chat == "" {
		p.answer(w, job(r.Context()), "event")
		return
	}
	ctx := withIntake(r.Context(), routeEvents, body, received, slow)
	p.answer(w, p.inChatOrder(ctx, chat, tenant, job), "event") // a message, in its chat's order
}

// notCallback handles an envelope of a type the routes do not deliver
// (over HTTP, url_verification aside): app_rate_limited, Slack's notice
// that it holds the app's events back, is logged, any other counted
// dropped (unsupported).
func (p *Platform) notCallback(env *envelope) {
	if env.Type == "app_rate_limited" {
		p.log.Warn("slack is rate limiting the app's events", "team", env.TeamID)
		return
	}
	p.drop(dropUnsupported, "")
}

// serveInteractions handles POST /slack/interactions: a prompt press is
// delivered before the 200 (Slack's 3 s acknowledgement); every other
// interaction is answered and dropped.
func (p *Platform) serveInteractions(w http.ResponseWriter, r *http.Request) {
	received := p.clock.Now()
	body, release, ok := p.verified(w, r)
	if !ok {
		return
	}
	defer release()
	ic, ok := interactionOf(body)
	if !ok {
		p.drop(dropMalformed, "")
		http.Error(w, "malformed interaction", http.StatusBadRequest)
		return
	}
	pr, err := p.interaction(withIntake(r.Context(), routeInteractions, body, received, ""), &ic, received)
	if busyPress(err) {
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush() // acknowledged before the post
		p.tellBusy(ic.ResponseURL, &pr)
		return
	}
	p.answer(w, err, "prompt press")
}

// interactionOf reads the payload of an interactions request body.
func interactionOf(body []byte) (ic slack.InteractionCallback, ok bool) {
	form, err := url.ParseQuery(string(body))
	return ic, err == nil && json.Unmarshal([]byte(form.Get("payload")), &ic) == nil
}

// commandOf reads a slash command request body.
func commandOf(body []byte) (slashCommand, bool) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return slashCommand{}, false
	}
	return slashFromFields(form.Get), true
}

// serveCommands handles POST /slack/commands: the command is delivered
// before the answer, an ephemeral acknowledgement (the native "Running
// `/x`…").
func (p *Platform) serveCommands(w http.ResponseWriter, r *http.Request) {
	received := p.clock.Now()
	body, release, ok := p.verified(w, r)
	if !ok {
		return
	}
	defer release()
	c, ok := commandOf(body)
	if !ok {
		p.drop(dropMalformed, "")
		http.Error(w, "malformed command", http.StatusBadRequest)
		return
	}
	text, err := p.command(r.Context(), body, &c, received)
	if err != nil || text == "" {
		p.answer(w, err, "slash command")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"response_type": "ephemeral", "text": text})
}
