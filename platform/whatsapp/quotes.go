package whatsapp

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"connector/internal/clock"
	"connector/internal/textsplit"
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
type quotes struct {
	cache *lru.Cache[quoteKey, quote]
	vault vault.Store // gives each tenant's creation (Since)
	clock clock.Clock
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

func newQuotes(v vault.Store, clk clock.Clock) *quotes {
	c, _ := lru.New[quoteKey, quote](maxQuotes) // size > 0: cannot fail
	return &quotes{cache: c, vault: v, clock: clk}
}

// add remembers text as message id of tenant's conversation with user.
func (q *quotes) add(tenant, user, id, text string) {
	if id != "" && text != "" {
		q.cache.Add(quoteKey{user, id}, quote{tenant: tenant, text: textsplit.Truncate(text, maxQuoteBytes), created: vault.Creation(q.vault, tenant), at: q.clock.Now()})
	}
}

// text returns what add remembered for message id of tenant's
// conversation with user, "" when nothing; other is set, and the text
// "", when it was remembered for another tenant or an earlier tenant of
// the id.
func (q *quotes) text(tenant, user, id string) (text string, other bool) {
	t, ok := q.cache.Get(quoteKey{user, id})
	if ok && (t.tenant != tenant || vault.Outdated(q.vault, tenant, t.at, t.created)) {
		return "", true
	}
	return t.text, false
}
