package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/vault"
)

// epoch starts the fake clocks.
var epoch = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

// globalWaiting counts the requests of tenants waiting for the global budget.
func globalWaiting(e *env, tenants ...string) int {
	n := 0
	for _, tenant := range tenants {
		n += e.p.sched.Waiting(tenant)
	}
	return n
}

// storm answers some message posts with 429s: every 5th with a route 429,
// every 11th with a global 429 that carries only Retry-After (the kind
// discordgo misses). It records when, on the platform's clock, every request
// arrived.
type storm struct {
	clock    clock.Clock
	mu       sync.Mutex
	n        int
	arrivals []time.Time
	globals  []time.Time
}

const stormGlobalRetry = 200 * time.Millisecond

func (s *storm) hook(w http.ResponseWriter, r *http.Request, _ []byte) bool {
	if r.Method != "POST" || !strings.HasSuffix(r.URL.Path, "/messages") {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.arrivals = append(s.arrivals, now)
	s.n++
	switch {
	case s.n%11 == 0:
		s.globals = append(s.globals, now)
		w.Header().Set("Retry-After", "1")
		w.Header().Set("X-RateLimit-Global", "true")
		w.Header().Set("X-RateLimit-Scope", "global")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"message":"You are being rate limited.","retry_after":%g,"global":true}`, stormGlobalRetry.Seconds())
		return true
	case s.n%5 == 0:
		w.Header().Set("Retry-After", "1")
		w.Header().Set("X-RateLimit-Limit", "5")
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset-After", "0.05")
		w.Header().Set("X-RateLimit-Bucket", "abcd")
		w.Header().Set("X-RateLimit-Scope", "user")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"message":"You are being rate limited.","retry_after":0.05,"global":false}`)
		return true
	}
	return false
}

// TestRateLimitStormLosesNothingAndHoldsGlobalLimit floods two tenants'
// sends into a Discord answering 429s, on a fake clock that moves only while
// no request is in flight (clocktest.Fake.Drive): arrival times are the
// instants the limiter let each request go, so "at most 50 a second" is
// checked exactly, whatever the machine's load.
func TestRateLimitStormLosesNothingAndHoldsGlobalLimit(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, discordtest.Options{}, func(c *Config) {
		c.GlobalPerSecond, c.GlobalBurst = 40, 5
	})
	e.startReady(t)
	st := &storm{clock: clk}
	e.fake.SetHook(st.hook)

	type job struct{ tenant, chat, content string }
	var jobs []job
	for i := range 90 {
		jobs = append(jobs, job{"t1", []string{chanGeneral, chanRandom}[i%2], fmt.Sprintf("flood-%03d", i)})
	}
	for i := range 15 {
		jobs = append(jobs, job{"t2", chanOther, fmt.Sprintf("quiet-%03d", i)})
	}
	var (
		mu       sync.Mutex
		order    []string
		finished atomic.Int64
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, j := range jobs {
		go func() {
			defer finished.Add(1)
			body, _ := json.Marshal(map[string]any{"op": "send", "chat_id": j.chat, "content": j.content, "reply_to": nil, "metadata": map[string]any{}})
			a, err := contract.DecodeAction(body)
			if err != nil {
				t.Error(err)
				return
			}
			if r := e.p.Execute(ctx, j.tenant, &a); !r.Success {
				t.Errorf("%s: %+v", j.content, r)
			}
			mu.Lock()
			order = append(order, j.tenant)
			mu.Unlock()
		}()
	}
	clk.Drive(t, len(jobs), func() int { return int(finished.Load()) }, func() int { return globalWaiting(e, "t1", "t2") })

	// No request lost or duplicated: every content exactly once.
	seen := map[string]int{}
	for _, ch := range []string{chanGeneral, chanRandom, chanOther} {
		for _, m := range e.fake.Messages(ch) {
			seen[m.Content]++
		}
	}
	for _, j := range jobs {
		if seen[j.content] != 1 {
			t.Errorf("%s delivered %d times", j.content, seen[j.content])
		}
	}
	if len(seen) != len(jobs) {
		t.Errorf("fake holds %d distinct messages, want %d", len(seen), len(jobs))
	}

	st.mu.Lock()
	arrivals := slices.Clone(st.arrivals)
	globals := slices.Clone(st.globals)
	st.mu.Unlock()
	if len(globals) == 0 || len(arrivals) <= len(jobs) {
		t.Fatalf("storm too mild: %d arrivals, %d global 429s", len(arrivals), len(globals))
	}
	// The global limit holds: at most 50 requests reach Discord in any
	// second (the budget allows 5 + 40).
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	for i, a := range arrivals {
		n := 0
		for _, b := range arrivals[i:] {
			if b.Sub(a) >= time.Second {
				break
			}
			n++
		}
		if n > 50 {
			t.Fatalf("%d requests within one second from %v", n, a)
		}
	}
	// A global 429 without Reset-After pauses every route: only requests
	// already let go at that instant arrive before the retry time.
	for _, g := range globals {
		for _, a := range arrivals {
			if d := a.Sub(g); d > 0 && d < stormGlobalRetry {
				t.Fatalf("request %v after a global 429 that asked for %v", d, stormGlobalRetry)
			}
		}
	}
	// Fair share: the quiet tenant is not starved behind the flood.
	lastQuiet := 0
	for i, tenant := range order {
		if tenant == "t2" {
			lastQuiet = i
		}
	}
	if lastQuiet > len(order)/2 {
		t.Fatalf("t2's last send finished at position %d of %d", lastQuiet, len(order))
	}
}

// bucketed answers message posts with per-channel buckets of 2 per 300 ms
// (on the platform's clock), and a 429 to a client that does not respect
// them.
type bucketed struct {
	clock   clock.Clock
	mu      sync.Mutex
	used    map[string]int
	reset   map[string]time.Time
	over    int
	arrived int
}

func (b *bucketed) hook(w http.ResponseWriter, r *http.Request, _ []byte) bool {
	if r.Method != "POST" || !strings.HasSuffix(r.URL.Path, "/messages") {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived++
	ch := r.URL.Path
	now := b.clock.Now()
	if !now.Before(b.reset[ch]) {
		b.used[ch], b.reset[ch] = 0, now.Add(300*time.Millisecond)
	}
	b.used[ch]++
	left := b.reset[ch].Sub(now).Seconds()
	w.Header().Set("X-RateLimit-Limit", "2")
	w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(left, 'f', 3, 64))
	w.Header().Set("X-RateLimit-Bucket", "msgs")
	if b.used[ch] > 2 {
		b.over++
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"message":"You are being rate limited.","retry_after":%.3f,"global":false}`, left)
		return true
	}
	w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(2-b.used[ch]))
	return false
}

func TestRouteBucketsAreHonoured(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	e.startReady(t)
	b := &bucketed{clock: clk, used: map[string]int{}, reset: map[string]time.Time{}}
	e.fake.SetHook(b.hook)
	// The actions are decoded here, where t.Fatal may stop the test; the
	// goroutine below only reports through t.Errorf and returns.
	actions := make([]contract.Action, 7)
	for i := range actions {
		a, err := contract.DecodeAction(json.RawMessage(fmt.Sprintf(`{"op":"send","chat_id":"102","content":"seq-%d","reply_to":null,"metadata":{}}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		actions[i] = a
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := clk.Now()
	var finished atomic.Int64
	go func() {
		defer finished.Add(1)
		for i := range actions {
			r := e.p.Execute(ctx, "t1", &actions[i])
			if !r.Success {
				t.Errorf("send %d = %+v", i, r)
				return
			}
		}
	}()
	clk.Drive(t, 1, func() int { return int(finished.Load()) }, func() int { return globalWaiting(e, "t1") })
	b.mu.Lock()
	defer b.mu.Unlock()
	// Sends go one after another, so even the first one's answer is known
	// before the next: no request may overrun the bucket.
	if b.over > 0 {
		t.Fatalf("%d requests overran a known bucket", b.over)
	}
	if got := len(e.fake.Messages(chanRandom)); got != 7 {
		t.Fatalf("%d messages, want 7", got)
	}
	// 7 sends at 2 per 300 ms wait for three resets.
	if took := clk.Now().Sub(start); took < 900*time.Millisecond {
		t.Fatalf("7 sends took %v on the clock, want at least 900ms (three bucket resets)", took)
	}
}

// TestRateLimitBeyondDeadlineFailsFast: a 429 whose retry_after (30 s)
// lies beyond the op's deadline (request_timeout, 10 s: the whole call to
// the fake fits it however loaded the machine) answers rate_limited at
// once instead of waiting.
func TestRateLimitBeyondDeadlineFailsFast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.RequestTimeout = 10 * time.Second })
	e.startReady(t)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != "POST" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"message":"You are being rate limited.","retry_after":30,"global":false}`)
		return true
	})
	a, _ := contract.DecodeAction(json.RawMessage(`{"op":"send","chat_id":"102","content":"x","reply_to":null,"metadata":{}}`))
	r := e.p.Execute(t.Context(), "t1", &a)
	if r.Success || r.Code != contract.CodeRateLimited || r.RetryAfterMS != 30000 {
		t.Fatalf("result = %+v", r)
	}
}

func TestBreakerStopsBeforeBan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.InvalidRequestLimit, c.TenantInvalidRequestLimit = 5, 5 })
	e.startReady(t)
	var mu sync.Mutex
	forbidden := 0
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != "POST" {
			return false
		}
		mu.Lock()
		forbidden++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"message":"Missing Access","code":50001}`)
		return true
	})
	for i := range 8 {
		r := execute(t, e, "t1", `{"op":"typing","chat_id":"102","metadata":{}}`)
		if r.Success {
			t.Fatalf("typing %d succeeded", i)
		}
		if i >= 5 && r.Code != contract.CodeUnavailable {
			t.Fatalf("call %d after the breaker opened = %+v", i, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if forbidden != 5 {
		t.Fatalf("%d requests reached Discord, want 5", forbidden)
	}
	if st := e.p.Status(); st.Ready {
		t.Fatalf("status with the breaker open = %+v", st)
	}
}

func TestUnauthorizedPausesREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	calls := 0
	var mu sync.Mutex
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != "POST" {
			return false
		}
		mu.Lock()
		calls++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"message":"401: Unauthorized","code":0}`)
		return true
	})
	r1 := execute(t, e, "t1", `{"op":"typing","chat_id":"102","metadata":{}}`)
	r2 := execute(t, e, "t1", `{"op":"typing","chat_id":"102","metadata":{}}`)
	mu.Lock()
	defer mu.Unlock()
	if r1.Success || r2.Code != contract.CodeUnavailable || calls != 1 {
		t.Fatalf("r1 %+v r2 %+v calls %d", r1, r2, calls)
	}
}

// TestExpiredInteractionTokenDoesNotPauseREST: Discord answers a follow-up
// whose interaction token expired with 401 Invalid Webhook Token. That is
// about the token, not the bot's: it is charged to the tenant, and other
// calls go on (a bot-token 401 pauses everything; see above).
func TestExpiredInteractionTokenDoesNotPauseREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if !strings.HasPrefix(r.URL.Path, "/api/v9/webhooks/") {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"message":"Invalid Webhook Token","code":50027}`)
		return true
	})
	key := "agent:main:discord:group:101:501"
	if err := e.vault.Put(t.Context(), vault.Key{Tenant: "t1", SessionKey: key, Kind: vault.KindDiscordInteractionToken},
		vault.Entry{Value: vault.NewSecret("expired-interaction-token"), Ref: "9000/" + chanGeneral}); err != nil {
		t.Fatal(err)
	}
	r := execute(t, e, "t1", `{"op":"follow_up","session_key":"`+key+`","kind":"discord.interaction_token","content":"late","metadata":{}}`)
	if r.Success || r.Code != contract.CodePlatformError {
		t.Fatalf("follow_up with an expired token = %+v", r)
	}
	for _, tenant := range []string{"t1", "t2"} {
		chat := map[string]string{"t1": chanRandom, "t2": chanOther}[tenant]
		if r := execute(t, e, tenant, `{"op":"typing","chat_id":"`+chat+`","metadata":{}}`); !r.Success {
			t.Fatalf("%s's typing after a webhook 401 = %+v", tenant, r)
		}
	}
	if st := e.p.Status(); !st.Ready {
		t.Fatalf("status after a webhook 401 = %+v", st)
	}
}

// forbidOn answers message posts and typing in channel with 403 Missing
// Permissions, as Discord does where the bot lacks them, and counts them.
type forbidOn struct {
	channel string
	mu      sync.Mutex
	n       int
}

func (f *forbidOn) hook(w http.ResponseWriter, r *http.Request, _ []byte) bool {
	if r.Method != "POST" || !strings.HasPrefix(r.URL.Path, "/api/v9/channels/"+f.channel+"/") {
		return false
	}
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprint(w, `{"message":"Missing Permissions","code":50013}`)
	return true
}

func (f *forbidOn) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// TestOneTenantsInvalidRequestsDoNotStopOthers: tenant t1 keeps sending
// where the bot may not post. Its 403s are charged to t1 alone: once its
// share is spent its calls are refused with rate_limited before reaching
// Discord, while t2's sends succeed and the platform stays ready. Its share
// comes back as the answers leave the 10-minute window (injected clock).
func TestOneTenantsInvalidRequestsDoNotStopOthers(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	const botLimit = 40 // default share: 40/8 = 5
	e := newEnvOn(t, clk, discordtest.Options{}, func(c *Config) { c.InvalidRequestLimit = botLimit })
	e.startReady(t)
	f := &forbidOn{channel: chanGeneral}
	e.fake.SetHook(f.hook)
	// A second per call refills the global budget, which waits on clk too.
	call := func(tenant, action string) contract.Result {
		clk.Advance(time.Second)
		return execute(t, e, tenant, action)
	}

	codes := map[string]int{}
	for range 3 * botLimit {
		r := call("t1", `{"op":"send","chat_id":"101","content":"x","reply_to":null,"metadata":{}}`)
		codes[r.Code]++
		if r.Code == contract.CodeRateLimited && (r.RetryAfterMS <= 0 || r.RetryAfterMS > 600_000) {
			t.Fatalf("refusal = %+v, want retry_after_ms within 10 minutes", r)
		}
	}
	t.Logf("t1's %d sends: %v; %d reached Discord", 3*botLimit, codes, f.count())
	if got := f.count(); got != 5 {
		t.Fatalf("%d of t1's calls reached Discord, want its share of 5", got)
	}
	if codes[contract.CodePlatformError] != 5 || codes[contract.CodeRateLimited] != 3*botLimit-5 {
		t.Fatalf("t1's results = %v", codes)
	}
	// Another of t1's channels is refused too: the share is the tenant's.
	if r := call("t1", `{"op":"typing","chat_id":"102","metadata":{}}`); r.Code != contract.CodeRateLimited {
		t.Fatalf("t1's typing elsewhere = %+v", r)
	}
	for i := range 3 {
		if r := call("t2", fmt.Sprintf(`{"op":"send","chat_id":"201","content":"b-%d","reply_to":null,"metadata":{}}`, i)); !r.Success {
			t.Fatalf("t2's send %d while t1 misbehaves = %+v", i, r)
		}
	}
	if st := e.p.Status(); !st.Ready {
		t.Fatalf("status while one tenant misbehaves = %+v", st)
	}
	clk.Advance(breakerSlots * breakerSlotSpan) // the span Discord counts invalid answers over
	if r := call("t1", `{"op":"typing","chat_id":"102","metadata":{}}`); !r.Success {
		t.Fatalf("t1 after its answers left the window = %+v", r)
	}
}

// reactBuckets answers every reaction with Discord's rate-limit headers
// of one shared bucket, as Discord does for a channel's reactions.
func reactBuckets(w http.ResponseWriter, r *http.Request, _ []byte) bool {
	if strings.Contains(r.URL.Path, "/reactions/") {
		w.Header().Set("X-RateLimit-Limit", "5")
		w.Header().Set("X-RateLimit-Remaining", "4")
		w.Header().Set("X-RateLimit-Reset-After", "0.250")
		w.Header().Set("X-RateLimit-Bucket", "reactions")
	}
	return false
}

// TestReactionEmojiIsNotARoute: the emoji of a reaction is a parameter of
// one route, not a route of its own: reactions with many different emoji
// leave the limiter one route template, so a gateway sending ever new
// emoji neither grows its memory nor gets a fresh bucket each time.
func TestReactionEmojiIsNotARoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.SetHook(reactBuckets)
	sent := execute(t, e, "t1", `{"op":"send","chat_id":"101","content":"react to me","reply_to":null,"metadata":{}}`)
	if !sent.Success {
		t.Fatalf("send = %+v", sent)
	}
	for i := range 20 {
		emoji := fmt.Sprintf("e%d:%d", i, 1000+i)
		body, _ := json.Marshal(map[string]any{"op": "react", "chat_id": chanGeneral, "message_id": sent.MessageID, "emoji": emoji, "metadata": map[string]any{}})
		execute(t, e, "t1", string(body)) // the fake knows no such emoji: the answer does not matter
	}
	routes := e.p.sess.Client.Transport.(*transport).routes
	routes.mu.Lock()
	defer routes.mu.Unlock()
	if n := len(routes.hashes); n != 1 {
		t.Fatalf("the limiter holds %d route templates after reactions with 20 emoji, want 1: %v", n, slices.Collect(maps.Keys(routes.hashes)))
	}
}

// TestLiveRouteBucketsStayBounded: more than maxBuckets routes learn a
// bucket that resets an hour later (from headers, or a route 429 without
// them), all within the hour: the limiter keeps maxBuckets, the least
// recently used forgotten, and the most recent still paces its route.
// Before, the sweep found none whose reset passed and every one was kept
// (each new one sweeping them all again).
func TestLiveRouteBucketsStayBounded(t *testing.T) {
	t.Parallel()
	l := newRouteLimiter(clocktest.New(epoch))
	route := func(i int) string {
		return parseRoute("POST", fmt.Sprintf("/api/v10/channels/%d/messages", 1_000_000+i)).key
	}
	for i := range maxBuckets + 1 {
		if i%2 == 0 {
			l.update(route(i), rateHeaders{known: true, limit: 5, resetAfter: time.Hour})
		} else {
			l.limited(route(i), time.Hour)
		}
	}
	l.mu.Lock()
	n := l.buckets.Len()
	l.mu.Unlock()
	if n > maxBuckets {
		t.Fatalf("the limiter holds %d live buckets, want at most %d", n, maxBuckets)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var limited *platform.RateLimitedError
	if err := l.acquire(ctx, route(maxBuckets)); !errors.As(err, &limited) {
		t.Fatalf("the newest bucket's route: acquire = %v, want it rate limited", err)
	}
}

// TestLimitedRouteBucketOutlivesNewerOnes: a route 429 empties its bucket
// for an hour; maxBuckets routes then learn buckets with requests left:
// the limited one is kept (the least recently used bucket that still has
// requests goes instead), and its route still waits. Before, it was
// forgotten as the least recently used, and its next request drew
// another 429 from Discord.
func TestLimitedRouteBucketOutlivesNewerOnes(t *testing.T) {
	t.Parallel()
	l := newRouteLimiter(clocktest.New(epoch))
	route := func(i int) string {
		return parseRoute("POST", fmt.Sprintf("/api/v10/channels/%d/messages", 1_000_000+i)).key
	}
	l.limited(route(0), time.Hour)
	for i := range maxBuckets {
		l.update(route(1+i), rateHeaders{known: true, limit: 5, remaining: 5, resetAfter: time.Hour})
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var limited *platform.RateLimitedError
	if err := l.acquire(ctx, route(0)); !errors.As(err, &limited) {
		t.Fatalf("the limited route after %d newer buckets: acquire = %v, want it rate limited", maxBuckets, err)
	}
}
