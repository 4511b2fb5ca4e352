package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"

	"connector/platform"
	"connector/session"
	"connector/vault"
)

// The interactions endpoint, POST /discord/interactions:
//
//	413  body over MaxInteractionBytes
//	401  missing or bad X-Signature-Ed25519, or X-Signature-Timestamp more
//	     than InteractionSkew away from now (Discord's routine checks
//	     expect 401 for bad signatures)
//	400  body not an interaction
//	409  interaction id already seen (a replay)
//	503  the platform is not running (Run not started or stopped),
//	     maxProcessing interactions are in flight for over a second, or
//	     the interaction could not be delivered within 2.5 s (the relay
//	     did not store it), or a press's prompt's poster could not be
//	     looked up
//	200  PING -> {"type":1}; autocomplete -> {"type":8} with no choices;
//	     a guild no tenant claims, or a DM with no dm_tenant -> an
//	     ephemeral "not connected" message (type 4); otherwise the deferred
//	     response, type 5 (type 6 for components), written once the token
//	     is in the vault and the normalized inbound (or interrupt) was
//	     delivered: stored by the relay for the tenant's gateways.

var (
	ackPong         = []byte(`{"type":1}`)
	ackDeferred     = []byte(`{"type":5}`)
	ackDeferredComp = []byte(`{"type":6}`)
	ackNoChoices    = []byte(`{"type":8,"data":{"choices":[]}}`)
	ackNotConnected = []byte(`{"type":4,"data":{"content":"This server is not connected to an agent.","flags":64}}`)
)

// bufPool holds the signed-message scratch space.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (p *Platform) serveInteractions(w http.ResponseWriter, r *http.Request) {
	received := p.clock.Now()
	body, release, ok := platform.ReadBody(w, r, p.cfg.MaxInteractionBytes, "body too large", p.metrics, platformName)
	if !ok {
		return
	}
	defer release()
	scratch := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(scratch)
	if !verifySignature(p.pubKey, r.Header.Get(headerSignature), r.Header.Get(headerTimestamp),
		body, received, p.cfg.InteractionSkew, scratch) {
		p.reject(w, http.StatusUnauthorized, "invalid request signature")
		return
	}
	var in wireInteraction
	if err := json.Unmarshal(body, &in); err != nil || in.ID == "" || in.Type == 0 {
		p.reject(w, http.StatusBadRequest, "not an interaction")
		return
	}
	ack, status := p.acceptInteraction(&in, received, nil)
	switch status {
	case 0:
	case http.StatusConflict:
		p.reject(w, status, "duplicate interaction")
		return
	default:
		p.reject(w, status, http.StatusText(status))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(ack)
}

func (p *Platform) reject(w http.ResponseWriter, status int, msg string) {
	p.metrics.Dropped(platformName, "rejected_"+http.StatusText(status))
	http.Error(w, msg, status)
}

// acceptInteraction dedupes a verified interaction, decides its immediate
// answer and starts its processing. respond, when set, sends that answer
// through the REST callback (interactions that arrive over the Gateway,
// where a PING needs none); a webhook answers inline. A non-zero status
// means refuse (409 for an id already seen, on any instance).
func (p *Platform) acceptInteraction(in *wireInteraction, received time.Time, respond func(ctx context.Context, ack []byte) error) ([]byte, int) {
	// Discord waits 3 s for the answer: the claim, routing (which may write
	// a grant), the wait for a slot and the processing all end by deadline,
	// and a callback by answerBy, on the wall clock as Discord's wait is.
	now := time.Now()
	deadline, answerBy := now.Add(processDeadline), now.Add(answerWindow)
	if status := p.claimInteraction(in.ID, received, deadline); status != 0 {
		return nil, status
	}
	switch in.Type {
	case discordgo.InteractionPing:
		return ackPong, 0
	case discordgo.InteractionApplicationCommandAutocomplete:
		return p.answerNow(respond, ackNoChoices, answerBy)
	case discordgo.InteractionApplicationCommand, discordgo.InteractionMessageComponent, discordgo.InteractionModalSubmit:
	default:
		p.metrics.Dropped(platformName, "unsupported_interaction")
		return nil, http.StatusBadRequest
	}
	life := p.enter()
	if life == nil {
		return nil, http.StatusServiceUnavailable
	}
	defer p.work.Done()
	author := ""
	if u := in.user(); u != nil {
		author = u.ID
	}
	admit, cancel := context.WithDeadline(life.ctx, deadline)
	defer cancel()
	chat := p.chatOf(in.GuildID, in.ChannelID)
	if ch := in.Channel; ch != nil && ch.ID == in.ChannelID && infoFrom(ch).threadParent() != "" {
		chat.Parent = ch.ParentID // a thread the cache lacks (an instance without the Gateway)
	}
	pressed := ""
	if _, _, _, ok := promptPress(in.Data.CustomID); ok && in.Type == discordgo.InteractionMessageComponent && in.Message != nil {
		pressed = in.Message.ID
	}
	tenant, created, _, drop := p.route(admit, author, chat, pressed)
	if drop == dropPosterUnknown {
		p.metrics.Dropped(platformName, drop)
		return nil, http.StatusServiceUnavailable
	}
	if drop != "" {
		p.routeDropped(drop, in.GuildID, in.ChannelID)
		return p.answerNow(respond, ackNotConnected, answerBy)
	}
	ack := ackDeferred
	if in.Type == discordgo.InteractionMessageComponent {
		ack = ackDeferredComp
	}
	if !p.acquireSlot(admit) {
		p.metrics.Dropped(platformName, "overloaded")
		return nil, http.StatusServiceUnavailable
	}
	// The deferred response confirms the interaction to Discord, which never
	// sends it again: it goes out only once the interaction is delivered
	// (stored by the relay), within Discord's 3 s. A webhook waits for that;
	// a Gateway interaction calls back once it is done.
	ctx := platform.WithTenant(life.ctx, tenant)
	process := func() error {
		defer func() { <-p.slots }()
		pctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		return p.processInteraction(pctx, tenant, created, in, received)
	}
	if respond == nil {
		if err := process(); err != nil {
			return nil, http.StatusServiceUnavailable
		}
		return ack, 0
	}
	p.work.Add(1) // while this call's own holds Run
	go func() {
		defer p.work.Done()
		if process() != nil {
			return
		}
		rctx, cancel := context.WithDeadline(ctx, answerBy)
		defer cancel()
		if err := respond(rctx, ack); err != nil {
			p.log.Warn("discord interaction callback failed", "interaction_id", in.ID, "err", describe(err).Error)
		}
	}()
	return ack, 0
}

// claimInteraction claims interaction id for seenFor, across instances
// when there are several (platform.ClaimsFor), by deadline and, while Run
// runs, until it stops (a Gateway interaction's claim is work Run waits
// for); it returns 409 for an id already claimed, 503 when the store could
// not be asked, else 0.
func (p *Platform) claimInteraction(id string, received, deadline time.Time) int {
	parent := context.Background() // a webhook while Run is not running
	if life := p.running(); life != nil {
		parent = life.ctx
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	took, err := p.seen.Claim(ctx, "discord/interaction/"+id, received.Add(p.seenFor()))
	switch {
	case err != nil:
		p.metrics.Dropped(platformName, "dedupe_unavailable")
		p.log.Warn("discord interaction id not claimed; refused", "interaction_id", id, "err", err)
		return http.StatusServiceUnavailable
	case !took:
		p.metrics.Dropped(platformName, "duplicate")
		return http.StatusConflict
	}
	return 0
}

// seenFor is how long an interaction id is remembered: past the last
// instant a replay still verifies. A timestamp may be InteractionSkew
// ahead of the arrival and verifies until InteractionSkew after it, that
// instant included, so the id outlives 2×InteractionSkew.
func (p *Platform) seenFor() time.Duration { return 2*p.cfg.InteractionSkew + time.Second }

// processDeadline bounds everything before an interaction's answer (the
// claim of its id, routing, the wait for a slot, the processing), within
// the 3 s Discord waits for it.
const processDeadline = 2500 * time.Millisecond

// answerWindow is how long after its arrival Discord honours an
// interaction's callback: a Gateway interaction's callback is given up
// then.
const answerWindow = 3 * time.Second

// slotWait bounds how long an interaction waits for a processing slot
// before it is refused with 503 (Discord gives up after 3 s).
const slotWait = time.Second

// acquireSlot takes one of the maxProcessing slots, waiting up to slotWait.
func (p *Platform) acquireSlot(ctx context.Context) bool {
	select {
	case p.slots <- struct{}{}:
		return true
	default:
	}
	expired := make(chan struct{})
	t := p.clock.AfterFunc(slotWait, func() { close(expired) })
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return true
	case <-expired:
	case <-ctx.Done():
	}
	return false
}

// processInteraction normalizes an interaction routed to tenant, as
// created when it was routed (vault.Creation), moves its token into the
// vault under the session it belongs to, kept with that creation (a tenant
// made again meanwhile finds none), and delivers the event, which never
// carries the token. It returns the error of the token's store or of the
// delivery; an interaction dropped on purpose is not an error.
func (p *Platform) processInteraction(ctx context.Context, tenant string, created time.Time, in *wireInteraction, received time.Time) error {
	token := vault.NewSecret(in.Token)
	in.Token = ""
	t, err := p.normalizer(tenant).interaction(ctx, in)
	if err == nil && t.ev.PromptResponse != nil {
		if reason := p.promptDrop(tenant, in.Data.CustomID, t.ev.PromptResponse.PromptMessageID); reason != "" {
			err = drop(reason)
		}
	}
	if err != nil {
		p.dropped(err, "interaction_id", in.ID)
		return nil
	}
	key := p.key(tenant, &t.ev.Source)
	if !token.IsZero() {
		appID := p.cfg.ApplicationID
		if isSnowflake(in.ApplicationID) {
			appID = in.ApplicationID
		}
		ref := appID + "/" + in.ChannelID
		if src := &t.ev.Source; src.ChatType == session.ChatTypeDM {
			ref += "/" + src.UserID.Value // the DM's user, whom rule 4 places it by (opFollowUp)
		}
		err := p.vault.Put(ctx, vault.Key{Tenant: tenant, SessionKey: key, Kind: vault.KindDiscordInteractionToken},
			vault.Entry{Value: token, Ref: ref, Stored: received, Created: created})
		if err != nil {
			p.log.Warn("discord interaction token not stored; not confirmed", "interaction_id", in.ID, "err", err)
			return err
		}
	}
	return p.deliver(ctx, tenant, created, t, received)
}

// gatewayInteraction handles INTERACTION_CREATE delivered over the Gateway
// (when no interactions endpoint URL is set): same dedupe and processing,
// acknowledged through POST /interactions/{id}/{token}/callback. It runs on
// the Gateway reader, so the admission (the id's claim in the store, a
// grant, the wait for a slot) runs on a goroutine of its own, at most
// maxAdmitting at once: past that the interaction is dropped, left
// unanswered, and Discord shows its user a failure, rather than holding up
// the messages read after it. One older than Discord's answer window (by
// its id's snowflake time; replayed after a RESUME) is dropped.
func (p *Platform) gatewayInteraction(raw json.RawMessage) {
	received := p.clock.Now()
	var in wireInteraction
	if err := json.Unmarshal(raw, &in); err != nil || in.ID == "" || !isSnowflake(in.ID) {
		p.metrics.Dropped(platformName, "malformed")
		return
	}
	if at, err := discordgo.SnowflakeTimestamp(in.ID); err == nil && received.Sub(at) > answerWindow {
		// Replayed after a RESUME past Discord's answer window: it can no
		// longer be acknowledged, its user was shown a failure and may
		// have tried again, so the agent would get both.
		p.metrics.Dropped(platformName, "interaction_expired")
		return
	}
	if p.enter() == nil {
		return
	}
	select {
	case p.admitting <- struct{}{}:
	default:
		p.work.Done()
		p.metrics.Dropped(platformName, "overloaded")
		p.log.Warn("discord interaction dropped unanswered: too many Gateway interactions being admitted; it fails for its user",
			"interaction_id", in.ID, "max_admitting", cap(p.admitting))
		return
	}
	token := in.Token
	go func() {
		defer p.work.Done()
		defer func() { <-p.admitting }()
		_, status := p.acceptInteraction(&in, received, func(ctx context.Context, ack []byte) error {
			return p.rest(ctx, "POST", discordgo.EndpointInteractionResponse(in.ID, token), json.RawMessage(ack), nil)
		})
		if status != 0 && status != http.StatusConflict {
			p.log.Warn("discord interaction refused unanswered; it fails for its user", "interaction_id", in.ID, "status", status)
		}
	}()
}

// answerNow returns ack, an interaction's only answer; a Gateway
// interaction's (respond set) is sent in the background, by answerBy.
func (p *Platform) answerNow(respond func(context.Context, []byte) error, ack []byte, answerBy time.Time) ([]byte, int) {
	if respond == nil {
		return ack, 0
	}
	life := p.enter()
	if life == nil {
		return ack, 0
	}
	go func() {
		defer p.work.Done()
		ctx, cancel := context.WithDeadline(life.ctx, answerBy)
		defer cancel()
		if err := respond(ctx, ack); err != nil {
			p.log.Warn("discord interaction callback failed", "err", describe(err).Error)
		}
	}()
	return ack, 0
}
