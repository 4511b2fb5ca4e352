package whatsapp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/vault"
)

// Values of the payload the walk selects, as the native adapter.
const (
	objectWABA    = "whatsapp_business_account"
	fieldMessages = "messages"
)

// errNotRunning answers webhooks that arrive while Run is not running.
var errNotRunning = errors.New("whatsapp: not running")

// errElsewhere answers a message another instance is storing right now.
var errElsewhere = errors.New("whatsapp: another instance is storing this message; Meta will retry")

// ownerGate admits a tenant's linked owner whatever the tenant's DM gate
// says (the owner floor of author routing).
var ownerGate = &access{policy: policyOpen, allowAll: true}

// ingest walks one verified payload as _dispatch_payload does: only
// whatsapp_business_account objects, only "messages" changes; messages are
// ingested in order, then statuses counted. A message that could not be
// stored holds back only the later messages of its chat (number, user),
// which keeps each chat's order: the other chats' messages, other tenants'
// included, are stored all the same. ingest then returns the first such
// error, so the caller answers non-200 and Meta retries the payload (what
// was stored is then dropped as a duplicate, and the statuses, not counted
// yet, are counted once).
func (p *Platform) ingest(ctx context.Context, pl *payload, received time.Time) error {
	sink := p.sink.Load()
	if sink == nil {
		return errNotRunning
	}
	if pl.Object != objectWABA {
		p.deps.Metrics.Dropped(platformName, dropNotWABA)
		return nil
	}
	var values []*changeValue
	var first error
	failed := map[string]bool{} // chats (number/user) with a message not stored
	for _, e := range pl.Entry {
		for i := range e.Changes {
			c := &e.Changes[i]
			if c.Field != fieldMessages {
				p.deps.Metrics.Dropped(platformName, dropNonMessage)
				continue
			}
			values = append(values, &c.Value)
			names := c.Value.contactNames()
			for j := range c.Value.Messages {
				m := &c.Value.Messages[j]
				chat := strings.TrimSpace(c.Value.Metadata.PhoneNumberID) + "/" + strings.TrimSpace(m.From)
				if failed[chat] { // after it on the retry, in order
					continue
				}
				if err := p.message(ctx, *sink, &c.Value, m, names, received); err != nil {
					failed[chat] = true
					first = cmp.Or(first, err)
				}
			}
		}
	}
	if first != nil {
		return first
	}
	for _, v := range values {
		for j := range v.Statuses {
			p.status(strings.TrimSpace(v.Metadata.PhoneNumberID), &v.Statuses[j])
		}
	}
	return nil
}

// message ingests one message: one at a time per (business number, user),
// in arrival order; redeliveries dropped; a "/link <code>" consumed; the
// tenant resolved (the number's owner, else the user's linked tenant); the
// native classification and DM gate (classify); the conversation recorded;
// an attachment re-hosted; delivered; marked delivered.
func (p *Platform) message(ctx context.Context, sink platform.Sink, v *changeValue, m *message, names map[string]string, received time.Time) error {
	number := strings.TrimSpace(v.Metadata.PhoneNumberID)
	sender, wamid := strings.TrimSpace(m.From), strings.TrimSpace(m.ID)
	return p.turns.Do(ctx, number+"/"+sender, func() error {
		if wamid != "" {
			dup, err := p.delivered(ctx, number, wamid)
			if err == nil && !dup {
				release, claimErr := p.claim(ctx, "whatsapp_cloud/message/"+number+"/"+wamid, "message")
				if claimErr != nil {
					return claimErr
				}
				defer release()
				if p.deps.Cluster != nil { // delivered while we took the claim?
					dup, err = p.delivered(ctx, number, wamid)
				}
			}
			if err != nil {
				return err
			}
			if dup {
				p.drop(dropDuplicate, number, sender)
				return nil
			}
		}
		if code, ok := p.linkCode(m, sender); ok {
			if reason := p.links.Submit(sender, func(ctx context.Context) { p.redeemLink(ctx, number, sender, code) }); reason != "" {
				p.drop(reason, number, sender)
			}
			p.markDelivered(ctx, number, wamid)
			return nil
		}
		tenant, owner, grant := p.route(number, sender)
		created := vault.Creation(p.vault, tenant) // the creation it was routed under, before the store calls
		// A linked user wrote to a number no tenant owns: another tenant's
		// route key of it yields (registry BindOwn).
		if grant {
			p.grants.Add(ctx, number, "", tenant, created)
		}
		var live liveTap
		rec, tapped, err := p.promptOf(ctx, number, sender, m)
		if err != nil {
			return err
		}
		if tapped { // a tap on a prompt of the connector's: its poster's
			if wamid != "" && rec.By == wamid { // Meta's copy of the tap that answered it, its delivered mark not stored
				p.drop(dropDuplicate, number, sender)
				return nil
			}
			if !p.mayAct(rec.Tenant, sender, number) {
				p.drop(dropPromptNotOwned, number, sender)
				return nil
			}
			tenant, owner = rec.Tenant, p.owners.Load().Linked(sender, rec.Tenant)
			created = cmp.Or(rec.Created, vault.Creation(p.vault, tenant)) // the record's, as promptOf judged it
			if !rec.Answered {
				key := "whatsapp_cloud/prompt/" + number + "/" + sender + "/" + rec.msgID
				release, err := p.claim(ctx, key, "prompt")
				if err != nil {
					return err
				}
				defer release()
				again, ok, err := p.promptOf(ctx, number, sender, m)
				if err != nil {
					return err
				}
				if p.deps.Cluster == nil || ok && !again.Answered { // not answered meanwhile
					live = liveTap(rec.PromptID)
				}
			}
		}
		if tenant == "" {
			p.drop(dropUnclaimed, number, sender)
			return nil
		}
		gate := p.gate(tenant)
		if owner {
			gate = ownerGate
		}
		ev, drop := classify(m, names, v.Metadata.DisplayPhoneNumber, gate, live)
		if drop != "" {
			p.drop(drop, number, sender)
			return nil
		}
		sent := p.sentAt(m) // before the tenant's creation, maybe: the vault judges the entry by the creation it keeps
		if !p.newerRecorded(ctx, tenant, sender, sent) {
			p.converse(ctx, tenant, sender, conv{Number: number, Last: wamid}, sent, created)
		}
		if q := ev.ReplyTo; q != nil {
			q.Text, q.IsOwn = p.quotes.quoted(ctx, tenant, sender, ev.ReplyToMessageID, q.IsOwn)
		}
		p.quotes.add(tenant, sender, wamid, ev.Text, created)
		p.attachMedia(ctx, tenant, m, &ev)
		d := platform.Delivery{
			Kind: platform.KindInbound, Tenant: tenant, Platform: platformName,
			SessionKey: p.deps.Key(tenant, &ev.Source), ChatID: sender, Received: received, Created: created,
		}
		if ev.PromptResponse == nil && isStop(ev.Text) {
			d.Kind = platform.KindInterrupt
		} else {
			d.Event = &ev
		}
		if err := sink.Deliver(ctx, d); err != nil {
			return fmt.Errorf("whatsapp: deliver message of %s: %w", sender, err)
		}
		p.markDelivered(ctx, number, wamid)
		if md := m.media(); md != nil {
			p.rehosts.Delivered(tenant, strings.TrimSpace(md.ID))
		}
		if ev.PromptResponse != nil { // one tap answers a prompt
			rec.Answered, rec.By = true, wamid
			p.promptPosted(ctx, number, sender, rec.msgID, rec)
		}
		return nil
	})
}

// sentAt is when the user sent m, which the customer-service window runs
// from: its timestamp, unless that is in the future or older than Meta's
// retry period (vault.WhatsAppMessageTTL), and then now.
func (p *Platform) sentAt(m *message) time.Time {
	now := p.deps.Clock.Now()
	if s, err := strconv.ParseInt(strings.TrimSpace(m.Timestamp), 10, 64); err == nil {
		if sent := time.Unix(s, 0); !sent.After(now) && now.Sub(sent) < vault.WhatsAppMessageTTL {
			return sent
		}
	}
	return now
}

// lateAfter is how long after it was sent a message counts as late (a
// retry, or one held up): its conversation is then looked up first.
const lateAfter = time.Minute

// newerRecorded reports whether tenant's conversation with user records a
// message sent after sent already, which happens when a message arrives
// late: the conversation keeps the latest message.
func (p *Platform) newerRecorded(ctx context.Context, tenant, user string, sent time.Time) bool {
	if p.deps.Clock.Now().Sub(sent) < lateAfter {
		return false
	}
	cur, ok, _ := p.conversation(ctx, tenant, user)
	return ok && cur.wrote.After(sent)
}

// isStop reports the platform-side interrupt command "/stop", alone or
// with arguments.
func isStop(text string) bool {
	return text == "/stop" || strings.HasPrefix(text, "/stop ")
}

// route resolves the tenant of a message from sender to number by the
// ownership order (platform.Ownership): the number's owner (rule 1), else,
// for a number no tenant owns, the tenant the sender is linked to (rule 3).
// owner reports that the sender is linked to that tenant; grant, that
// the number has no owner, so the tenant holds it by grant (a grant of the
// number: platform.GrantedIn, which a route key of it yields to).
func (p *Platform) route(number, sender string) (tenant string, owner, grant bool) {
	r, ok := p.owners.Load().Route(sender, chatOf(sender, number))
	if !ok || r.Drop != "" {
		return "", false, false
	}
	return r.Tenant, r.Owner, r.Grant
}

// deliveredKey is the vault key marking message wamid to number delivered.
func deliveredKey(number, wamid string) vault.Key {
	return vault.Key{Tenant: numberSpace(number), SessionKey: wamid, Kind: vault.KindWhatsAppMessage}
}

// delivered reports whether message wamid to number was delivered (on any
// instance sharing the store, within vault.WhatsAppMessageTTL: Meta's
// retry period); err is set when the store could not tell, and the
// message is then retried (Meta sends it again), not delivered twice.
func (p *Platform) delivered(ctx context.Context, number, wamid string) (bool, error) {
	_, ok, err := vault.Lookup(ctx, p.vault, deliveredKey(number, wamid))
	return ok, err
}

// markDelivered records message wamid to number as delivered, even when
// ctx ended as the message was stored (Meta stopped waiting: it retries).
func (p *Platform) markDelivered(ctx context.Context, number, wamid string) {
	if wamid == "" {
		return
	}
	if err := p.vault.Put(context.WithoutCancel(ctx), deliveredKey(number, wamid), vault.Entry{Stored: p.deps.Clock.Now()}); err != nil {
		p.log.Warn("whatsapp delivered mark not stored; a redelivery would be delivered again", "err", err)
	}
}

// pendingTTL bounds how long a message's claim is held: longer than
// storing it may take, its attachment's download included.
const pendingTTL = 3 * time.Minute

// claim takes key for this instance (store.Claims, atomic across the
// instances sharing the store): a message wamid to number being stored
// (whatsapp_cloud/message/<number>/<wamid>), or a prompt being answered
// by a tap. errElsewhere when another instance holds it, which is
// storing it now (the claim ends with that, or after pendingTTL if it
// crashed, so a copy is delayed, never lost). Once the claim is taken, a
// message delivered (or a prompt answered) meanwhile, its claim already
// released, is found by the caller's second look. With a single instance
// (Deps.Cluster nil) the per-chat queue keeps copies apart, and nothing
// is written. release gives the claim up once what it claimed is
// delivered or failed; one another instance took since it lapsed stays.
func (p *Platform) claim(ctx context.Context, key, what string) (release func(), err error) {
	if p.deps.Cluster == nil || p.deps.Store == nil {
		return func() {}, nil
	}
	until := func() time.Time { return p.deps.Clock.Now().Add(pendingTTL) }
	switch c, err := platform.AwaitClaim(ctx, p.deps.Store.Claims(), p.deps.Clock, key, until, 0, nil); {
	case errors.Is(err, platform.ErrClaimHeld):
		p.deps.Metrics.Dropped(platformName, "in_progress_elsewhere")
		return nil, errElsewhere
	case err != nil:
		return nil, fmt.Errorf("whatsapp: claim %s: %w", what, err)
	default:
		return func() {
			if err := c.Release(5 * time.Second); err != nil {
				p.log.Warn("whatsapp claim not released; a redelivery waits for it to expire", "err", err)
			}
		}, nil
	}
}

// drop counts and logs a message that is not delivered.
func (p *Platform) drop(reason, number, sender string) {
	p.deps.Metrics.Dropped(platformName, reason)
	p.log.Debug("whatsapp message dropped", "reason", reason, "phone_number_id", number, "user_id", sender)
}

// status counts one delivery status for the tenant that sent the message
// (senderMark; UnknownSender when it is not a configured tenant now), else
// (a message sent before the mark, or by another app) for the tenant
// owning number; a failed one is logged with Meta's error code.
func (p *Platform) status(number string, st *status) {
	tenant, marked := strings.CutPrefix(st.Callback, senderMark)
	if !marked {
		tenant, _, _ = p.route(number, strings.TrimSpace(st.RecipientID))
	} else if known := p.tenants.Load(); known != nil {
		// The mark is what the webhook echoes: a tenant deleted since, or
		// any text another app on the account marked, is no label value.
		if _, ok := (*known)[tenant]; !ok {
			tenant = UnknownSender
		}
	}
	if tenant == "" {
		p.deps.Metrics.Dropped(platformName, dropUnclaimed)
		return
	}
	if p.statuses != nil {
		p.statuses.DeliveryStatus(platformName, tenant, statusLabel(st.Status))
	}
	if st.Status == "failed" {
		code, title := 0, ""
		if len(st.Errors) > 0 {
			code, title = st.Errors[0].Code, st.Errors[0].Title
		}
		p.log.Warn("whatsapp message failed", "tenant", tenant, "phone_number_id", number, "user_id", st.RecipientID,
			"code", code, "title", title)
	}
}

// UnknownSender is the tenant label of a status whose marked sender is
// not a configured tenant (SetTenants).
const UnknownSender = "unknown"

// statusLabel bounds the status values a metric label takes.
func statusLabel(s string) string {
	switch s {
	case "sent", "delivered", "read", "failed":
		return s
	}
	return "other"
}

// liveTap answers classify for live ingest: the connector sends no native
// adapter prompts, and the one prompt of its own a tap may answer is the
// live one promptOf found for the tapped message (its prompt id; "" for
// none).
type liveTap string

// native implements taps.
func (liveTap) native(string, string) bool { return false }

// prompt implements taps.
func (l liveTap) prompt(_, promptID string) bool { return l != "" && promptID == string(l) }

// promptRecord is who posted a prompt message (the tenant as created, and
// the action's prompt_id) and whether a tap answered it already (By: that
// tap's message id, so a copy of it Meta sends again is no later tap).
type promptRecord struct {
	Tenant   string    `json:"t"`
	PromptID string    `json:"p"`
	Answered bool      `json:"a,omitempty"`
	By       string    `json:"b,omitempty"`
	Created  time.Time `json:"c,omitzero"` // the tenant's creation (the vault's Since) when it posted
	stored   time.Time // when the prompt was sent (the vault entry's Stored)
	msgID    string    // the prompt message's id
}

// promptKey is the vault key of the prompt message msgID sent to user
// from number.
func promptKey(number, user, msgID string) vault.Key {
	return vault.Key{Tenant: numberSpace(number), SessionKey: user + ":" + msgID, Kind: vault.KindWhatsAppPrompt}
}

// promptPosted records rec as the prompt message msgID sent to user from
// number; the record expires the prompt kind's TTL after it was sent. It
// records what happened already (Meta took the prompt, a tap answering it
// was stored), so it is written even when ctx ended meanwhile (the vault
// bounds its store calls itself).
func (p *Platform) promptPosted(ctx context.Context, number, user, msgID string, rec promptRecord) {
	ref, _ := json.Marshal(rec) // strings and a bool: cannot fail
	if err := p.vault.Put(context.WithoutCancel(ctx), promptKey(number, user, msgID), vault.Entry{Ref: string(ref), Stored: cmp.Or(rec.stored, p.deps.Clock.Now())}); err != nil {
		p.log.Warn("whatsapp prompt not recorded; its taps go to the number's tenant as text", "tenant", rec.Tenant, "err", err)
	}
}

// promptOf returns the record of the prompt m taps: a reply (button or
// list row) whose id is a prompt token of the connector's, quoting (the
// context Meta adds to a tap) a prompt message sent to sender from number
// with that token's prompt id. A tap goes to the prompt's poster, never
// by the number's owner of the moment, which may have changed since. err
// is set when the store could not tell: the tap is retried (Meta sends
// it again), not taken for no prompt's.
func (p *Platform) promptOf(ctx context.Context, number, sender string, m *message) (promptRecord, bool, error) {
	r := m.tap()
	if r == nil || m.Context == nil {
		return promptRecord{}, false, nil
	}
	promptID, _, ok := contract.ParsePromptToken(strings.TrimSpace(r.ID))
	msgID := strings.TrimSpace(m.Context.ID)
	if !ok || msgID == "" {
		return promptRecord{}, false, nil
	}
	e, ok, err := vault.Lookup(ctx, p.vault, promptKey(number, sender, msgID))
	var rec promptRecord
	if err != nil {
		return rec, false, fmt.Errorf("whatsapp: the tapped prompt's record: %w", err)
	}
	if !ok || json.Unmarshal([]byte(e.Ref), &rec) != nil || rec.Tenant == "" || rec.PromptID != promptID ||
		vault.Outdated(p.vault, rec.Tenant, e.Stored, rec.Created) { // posted by an earlier tenant of the id
		return promptRecord{}, false, nil
	}
	rec.stored, rec.msgID = e.Stored, msgID
	return rec, true, nil
}

// linkCode returns the code of a "/link <code>" text message the platform
// must consume.
func (p *Platform) linkCode(m *message, sender string) (string, bool) {
	if p.deps.Linker == nil || sender == "" || m.kind() != "text" || m.grouped() {
		return "", false
	}
	return platform.ParseLinkCommand(m.body())
}

// redeemLink redeems code for sender and answers from number, on the link
// desk's workers (platform.LinkDesk: a webhook, and the messages behind it,
// never wait for it) and the link replies' own share of the budget
// (platform.LinkBudget).
func (p *Platform) redeemLink(ctx context.Context, number, sender, code string) {
	reply := p.deps.RedeemLink(ctx, platformName, sender, code, func(tenant string, created time.Time) {
		// Through another tenant's number the tenant may not act (sender):
		// its own conversation with the user, if any, stays. On the same
		// number it keeps the user's latest message id, which typing marks.
		// A number no tenant owns it is granted, as by the user's message
		// (message).
		owner, owned := p.owners.Load().Owner(chatOf(sender, number))
		if !owned {
			p.grants.Add(ctx, number, "", tenant, created)
		}
		if !owned || owner == tenant {
			c := conv{Number: number}
			if old, ok, _ := p.conversation(ctx, tenant, sender); ok && old.Number == number {
				c.Last = old.Last
			}
			p.converse(ctx, tenant, sender, c, p.deps.Clock.Now(), created)
		}
	})
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	msg := textMessage(sender, reply, "")
	err := p.paced(ctx, platform.LinkBudget, number, sender, func(ctx context.Context) error {
		_, err := p.graph.sendMessage(ctx, number, msg)
		return err
	})
	if err != nil {
		p.log.Warn("whatsapp /link reply not sent", "user_id", sender, "err", p.errorText(err))
	}
}
