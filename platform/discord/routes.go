package discord

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/internal/clock"
	"connector/platform"
)

// route identifies a REST call for Discord's per-route rate limits: the
// method and path template, plus the major parameter (channel, guild, or
// webhook id with its token) that Discord limits separately. Interaction
// tokens are hashed so no token is ever kept in the limiter's maps.
type route struct {
	key string
	// exemptGlobal: interaction callbacks and follow-ups are not counted
	// against the bot's global rate limit.
	exemptGlobal bool
	gateway      bool
}

// parseRoute classifies an API path like /api/v9/channels/1/messages/2.
// Only ids and fixed words may shape a route: a reaction's emoji, the one
// free text a path holds, is a parameter, so ever new emoji never make
// ever new routes (or buckets).
func parseRoute(method, path string) route {
	rest := path
	if _, version, ok := strings.Cut(path, "/api/v"); ok {
		_, rest, _ = strings.Cut(version, "/")
	}
	segs := strings.Split(strings.Trim(rest, "/"), "/")
	var b strings.Builder
	b.WriteString(method)
	r := route{}
	for i := 0; i < len(segs); i++ {
		s := segs[i]
		b.WriteByte(' ')
		switch {
		case i == 1 && (segs[0] == "channels" || segs[0] == "guilds" || segs[0] == "interactions"):
			b.WriteString(s) // major parameter
		case i == 1 && segs[0] == "webhooks":
			b.WriteString(s)
			if i+1 < len(segs) && !isSnowflake(segs[i+1]) {
				b.WriteString(" #")
				b.WriteString(hashToken(segs[i+1]))
				i++
			}
			r.exemptGlobal = true
		case i == 2 && segs[0] == "interactions":
			b.WriteString(":token")
			r.exemptGlobal = true
		case i > 0 && segs[i-1] == "reactions":
			b.WriteString(":emoji") // a parameter, chosen by the gateway
		case isSnowflake(s):
			b.WriteString(":id")
		default:
			b.WriteString(s)
		}
	}
	r.key = b.String()
	r.gateway = method == "GET" && rest == "gateway"
	return r
}

func hashToken(tok string) string {
	h := fnv.New64a()
	h.Write([]byte(tok))
	return strconv.FormatUint(h.Sum64(), 36)
}

// routeLimiter keeps Discord's per-route buckets, learned from the
// X-RateLimit-* headers. Routes that share a bucket (same X-RateLimit-Bucket)
// share its state per major parameter.
type routeLimiter struct {
	clock clock.Clock

	mu      sync.Mutex
	hashes  map[string]string // route template -> bucket hash
	buckets *simplelru.LRU[string, *bucketState]
}

type bucketState struct {
	limit     int
	remaining int
	reset     time.Time
}

// maxBuckets bounds the buckets kept, the least recently used forgotten,
// but for one still limited (bucketLocked): one forgotten before its
// reset costs its route at most a 429, which teaches it again.
const maxBuckets = 10_000

// keptLimited bounds the least recently used buckets still limited that
// one new bucket passes over (bucketLocked), so making it costs little.
const keptLimited = 16

func newRouteLimiter(clk clock.Clock) *routeLimiter {
	buckets, _ := simplelru.NewLRU[string, *bucketState](maxBuckets, nil) // a positive size: no error
	return &routeLimiter{clock: clk, hashes: map[string]string{}, buckets: buckets}
}

// bucketKey maps a route to its bucket: the shared hash when Discord told us
// one, else the route itself.
func (l *routeLimiter) bucketKey(r string) string {
	template, major := splitRoute(r)
	if h, ok := l.hashes[template]; ok {
		return h + "|" + major
	}
	return r
}

// splitRoute parts a route key into its template, the part shared by every
// channel (the major parameter, and a webhook's token, replaced: "POST
// channels 123 messages" becomes "POST channels {major} messages"), and its
// major parameter ("" when the resource has none).
func splitRoute(r string) (template, major string) {
	f := strings.Fields(r)
	if len(f) > 2 && slices.Contains([]string{"channels", "guilds", "webhooks", "interactions"}, f[1]) {
		major, f[2] = f[2], "{major}"
		if f[1] == "webhooks" && len(f) > 3 && strings.HasPrefix(f[3], "#") {
			major, f[3] = major+f[3], "{token}"
		}
	}
	return strings.Join(f, " "), major
}

// acquire waits until the route's bucket has a request left, reserving it.
// It fails at once when the bucket resets after ctx's deadline.
func (l *routeLimiter) acquire(ctx context.Context, r string) error {
	for {
		l.mu.Lock()
		now := l.clock.Now()
		st, _ := l.buckets.Get(l.bucketKey(r))
		if st == nil || st.remaining > 0 || !now.Before(st.reset) {
			if st != nil {
				if !now.Before(st.reset) && st.limit > 0 {
					st.remaining = st.limit
				}
				if st.remaining > 0 {
					st.remaining--
				}
			}
			l.mu.Unlock()
			return nil
		}
		wait := st.reset.Sub(now)
		l.mu.Unlock()
		// ctx's deadline is on the real clock, not l.clock: compare what
		// is left of it with the wait.
		if dl, ok := ctx.Deadline(); ok && wait > time.Until(dl) {
			return &platform.RateLimitedError{Wait: wait}
		}
		if err := l.clock.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// update records the bucket state Discord reported for r.
func (l *routeLimiter) update(r string, rl rateHeaders) {
	if !rl.known {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if rl.bucket != "" {
		template, _ := splitRoute(r)
		l.hashes[template] = rl.bucket
	}
	st := l.bucketLocked(l.bucketKey(r))
	st.limit = rl.limit
	st.remaining = rl.remaining
	st.reset = l.clock.Now().Add(rl.resetAfter)
}

// limited empties r's bucket until retryAfter from now (a route 429).
func (l *routeLimiter) limited(r string, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.bucketLocked(l.bucketKey(r))
	st.remaining = 0
	st.reset = l.clock.Now().Add(retryAfter)
}

// bucketLocked returns bucket k, made when there is none. When the
// limiter is full, the least recently used bucket goes, but one with no
// request left until its reset is kept, as if used (up to keptLimited of
// them: past those, a limited one goes too). Called under mu.
func (l *routeLimiter) bucketLocked(k string) *bucketState {
	if st, ok := l.buckets.Get(k); ok {
		return st
	}
	now := l.clock.Now()
	for range keptLimited {
		old, st, ok := l.buckets.GetOldest()
		if !ok || l.buckets.Len() < maxBuckets || st.remaining > 0 || !now.Before(st.reset) {
			break
		}
		l.buckets.Get(old)
	}
	st := &bucketState{}
	l.buckets.Add(k, st)
	return st
}
