package discord

import (
	"errors"
	"maps"
	"strconv"
	"sync"
	"time"

	"connector/internal/clock"
)

// Invalid-request window: Discord bans an IP that gets 10,000 invalid (401,
// 403, 429) answers within 10 minutes. Answers are counted in 60 slots of
// 10 seconds, once for the bot and once for the tenant that caused them.
const (
	// discordInvalidBan is how many invalid answers within 10 minutes get
	// the bot's IP banned.
	discordInvalidBan = 10_000
	breakerSlots      = 60
	breakerSlotSpan   = 10 * time.Second
	// unauthorizedPause is how long every REST call is refused after a 401
	// to a bot-authenticated route: Discord asks clients to stop after one,
	// since the token is not valid.
	unauthorizedPause = time.Minute
	// tenantShareDivisor sets the default per-tenant share: the bot-wide
	// limit divided by it, so that many tenants must spend their whole share
	// at once before the bot-wide breaker opens.
	tenantShareDivisor = 8
	// maxIdleWindows bounds the per-tenant windows kept before empty ones
	// are swept.
	maxIdleWindows = 1024
)

// errBreakerOpen is returned for REST calls refused by the bot-wide breaker.
var errBreakerOpen = errors.New("discord REST paused: too many invalid requests (401/403/429) recently")

// shareSpentError refuses a REST call of a tenant whose invalid answers
// within 10 minutes reached its share; other tenants are not affected.
type shareSpentError struct {
	limit      int
	retryAfter time.Duration
}

// Error says which limit and when the tenant may call again; it names
// nothing about other tenants.
func (e *shareSpentError) Error() string {
	return "discord invalid-request limit of this tenant reached (" + strconv.Itoa(e.limit) +
		" 401/403/429 answers within 10 minutes): retry after " + e.retryAfter.Round(time.Second).String()
}

// window counts events of the last 10 minutes in breakerSlots slots.
type window struct {
	counts    [breakerSlots]int
	slotStart [breakerSlots]int64 // slot epoch each count belongs to
}

// slotOf is the window slot t falls in.
func slotOf(t time.Time) int64 { return t.UnixNano() / int64(breakerSlotSpan) }

func (w *window) add(e int64) {
	i := int(e % breakerSlots)
	if w.slotStart[i] != e {
		w.slotStart[i], w.counts[i] = e, 0
	}
	w.counts[i]++
}

func (w *window) sum(e int64) int {
	sum := 0
	for i := range w.counts {
		if e-w.slotStart[i] < breakerSlots {
			sum += w.counts[i]
		}
	}
	return sum
}

// retryAfter is how long from now until the window holds fewer than limit
// events, as its oldest slots expire.
func (w *window) retryAfter(now time.Time, limit int) time.Duration {
	e := slotOf(now)
	excess := w.sum(e) - limit + 1
	for s := e - breakerSlots + 1; s <= e && excess > 0; s++ {
		if i := int(s % breakerSlots); w.slotStart[i] == s {
			excess -= w.counts[i]
		}
		if excess <= 0 {
			return time.Unix(0, (s+breakerSlots)*int64(breakerSlotSpan)).Sub(now)
		}
	}
	return 0
}

// breaker keeps the bot below Discord's invalid-request ban threshold and
// charges each invalid answer to the tenant whose call caused it: a tenant
// whose answers within 10 minutes reach tenantLimit is refused alone
// (*shareSpentError), and every call is refused (errBreakerOpen) when the
// bot's answers reach limit or for a minute after a 401. The connector's own
// calls (tenant "") count against the bot only.
type breaker struct {
	limit       int
	tenantLimit int
	clock       clock.Clock

	mu        sync.Mutex
	bot       window
	tenants   map[string]*window
	openUntil time.Time
}

func newBreaker(limit, tenantLimit int, c clock.Clock) *breaker {
	return &breaker{limit: limit, tenantLimit: tenantLimit, clock: c, tenants: make(map[string]*window)}
}

// admit reports whether tenant may make a REST call now: nil, errBreakerOpen
// or a *shareSpentError.
func (b *breaker) admit(tenant string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if now.Before(b.openUntil) || b.bot.sum(slotOf(now)) >= b.limit {
		return errBreakerOpen
	}
	if w := b.tenants[tenant]; w != nil && tenant != "" && w.sum(slotOf(now)) >= b.tenantLimit {
		return &shareSpentError{limit: b.tenantLimit, retryAfter: w.retryAfter(now, b.tenantLimit)}
	}
	return nil
}

// record counts one invalid answer against the bot and, unless tenant is
// "", against tenant.
func (b *breaker) record(tenant string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := slotOf(b.clock.Now())
	b.bot.add(e)
	if tenant == "" {
		return
	}
	w := b.tenants[tenant]
	if w == nil {
		if len(b.tenants) >= maxIdleWindows {
			b.sweepLocked(e)
		}
		w = &window{}
		b.tenants[tenant] = w
	}
	w.add(e)
}

// sweepLocked forgets tenants with nothing in their window.
func (b *breaker) sweepLocked(e int64) {
	maps.DeleteFunc(b.tenants, func(_ string, w *window) bool { return w.sum(e) == 0 })
}

// pause refuses every call for d.
func (b *breaker) pause(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if until := b.clock.Now().Add(d); until.After(b.openUntil) {
		b.openUntil = until
	}
}

// open reports whether the bot-wide breaker currently refuses every call.
func (b *breaker) open() bool { return errors.Is(b.admit(""), errBreakerOpen) }
