package whatsapp

import (
	lru "github.com/hashicorp/golang-lru/v2"

	"connector/internal/textsplit"
)

// quotes remembers the text of recent messages of each tenant's
// conversations, sent and received, by message id, as the native adapter's
// rich_sent_store does: Meta's reply context carries only the quoted
// message's id, and this is how a reply gets the quoted text
// (reply_to.text). It is per instance and bounded: an unknown id leaves the
// text empty.
type quotes struct {
	cache *lru.Cache[quoteKey, string]
}

type quoteKey struct{ tenant, user, id string }

// Bounds of the quote memory: entries, and bytes kept of each text.
const (
	maxQuotes     = 8192
	maxQuoteBytes = 2048
)

func newQuotes() *quotes {
	c, _ := lru.New[quoteKey, string](maxQuotes) // size > 0: cannot fail
	return &quotes{cache: c}
}

// add remembers text as message id of tenant's conversation with user.
func (q *quotes) add(tenant, user, id, text string) {
	if id != "" && text != "" {
		q.cache.Add(quoteKey{tenant, user, id}, textsplit.Truncate(text, maxQuoteBytes))
	}
}

// text returns what add remembered for message id, "" when nothing.
func (q *quotes) text(tenant, user, id string) string {
	t, _ := q.cache.Get(quoteKey{tenant, user, id})
	return t
}
