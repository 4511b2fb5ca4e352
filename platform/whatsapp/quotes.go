package whatsapp

import (
	"cmp"
	"context"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"connector/internal/clock"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/vault"
)

// quotes remembers the text of recent messages of each tenant's
// conversations, sent and received, by message id, as the native adapter's
// rich_sent_store does: Meta's reply context carries only the quoted
// message's id, and this is how a reply gets the quoted text
// (reply_to.text). It is per instance and bounded: an unknown id leaves the
// text empty. A text is kept with its tenant, the tenant's creation (the
// vault's Since) and the time, and one kept for another tenant, or for an
// earlier tenant of the id, deleted since (vault.Outdated), is not given:
// a tenant created again under the id, or one a user's messages reach
// after another's, quotes nothing of the other's conversations, whatever
// the instances' clocks say when the text was kept under a creation; nor
// is such a message of the bot's the tenant's own (reply_to.is_own).
// Which tenant the bot sent a message for is also marked in the vault
// (sent: platform.Grants.Posted, the user's wa_id as the chat), so an
// instance that did not send it judges is_own all the same (quoted), for
// the mark's 24 hours; the memory keeps a message however old, and the
// mark carries no text (the limit docs/contract.md states).
type quotes struct {
	cache *lru.Cache[quoteKey, quote]
	vault vault.Store // gives each tenant's creation (Since)
	clock clock.Clock
	marks *platform.Grants
}

type quoteKey struct{ user, id string }

// quote is a remembered text, its tenant, the tenant's creation when it
// was kept, and when that was.
type quote struct {
	tenant, text string
	created, at  time.Time
}

// Bounds of the quote memory: entries, and bytes kept of each text.
const (
	maxQuotes     = 8192
	maxQuoteBytes = 2048
)

func newQuotes(v vault.Store, clk clock.Clock, marks *platform.Grants) *quotes {
	c, _ := lru.New[quoteKey, quote](maxQuotes) // size > 0: cannot fail
	return &quotes{cache: c, vault: v, clock: clk, marks: marks}
}

// sent remembers message id the bot sent user for tenant as created at
// created (zero: as it is now): its text ("" for none) here, and its
// tenant in the vault (one store write per message sent).
func (q *quotes) sent(ctx context.Context, tenant, user, id, text string, created time.Time) {
	q.add(tenant, user, id, text, created)
	if id != "" {
		q.marks.Posted(ctx, user, id, tenant, created)
	}
}

// add remembers text as message id of tenant's conversation with user,
// kept for tenant as created at created (zero: as it is now).
func (q *quotes) add(tenant, user, id, text string, created time.Time) {
	if id != "" && text != "" {
		q.cache.Add(quoteKey{user, id}, quote{tenant: tenant, text: textsplit.Truncate(text, maxQuoteBytes), created: cmp.Or(created, vault.Creation(q.vault, tenant)), at: q.clock.Now()})
	}
}

// quoted returns what add remembered for message id of tenant's
// conversation with user ("" when nothing, or when it was remembered for
// another tenant or an earlier tenant of the id) and, for a message of the
// bot's (bots), whether it is tenant's own: remembered here for tenant,
// else marked for it (sent) by whichever instance sent it. A message
// known nowhere (sent over vault.ChatGrantTTL ago, before this was
// marked, or not by a tenant) or that the store could not look up is not
// tenant's own: another tenant's message must not pass for it.
func (q *quotes) quoted(ctx context.Context, tenant, user, id string, bots bool) (text string, own bool) {
	t, ok := q.cache.Get(quoteKey{user, id})
	switch {
	case ok && (t.tenant != tenant || vault.Outdated(q.vault, tenant, t.at, t.created)):
		return "", false
	case ok:
		return t.text, bots
	}
	return "", bots && q.marks.PostedBy(ctx, user, id, tenant)
}
