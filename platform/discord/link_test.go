package discord

import (
	"context"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/vault"
)

// codeLinker links with code "GOOD" to tenant t2 and refuses others,
// recording each call (the registry's redeem is tested in package
// registry and end to end in cmd/connector).
type codeLinker struct {
	mu      sync.Mutex
	calls   []string
	created time.Time // the creation of t2 that issued GOOD
}

func (l *codeLinker) Link(_ context.Context, platformName, user, code string) (string, time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, platformName+"/"+user+"/"+code)
	if code != "GOOD" {
		return "", time.Time{}, platform.ErrLinkRefused
	}
	return "t2", l.created, nil
}

// TestLinkDM: a "/link <code>" DM is redeemed for its author and answered
// in the DM, never delivered; an edit into one is dropped unredeemed; a
// DM of a linked user then reaches their tenant, not dm_tenant.
func TestLinkDM(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	linker := &codeLinker{}
	e.p.deps.Linker = linker
	e.startReady(t)
	ctx := waitCtx(t)
	replied := func(want string) {
		t.Helper()
		if _, err := e.fake.WaitRequest(ctx, func(q discordtest.Request) bool {
			return q.Method == http.MethodPost && q.Path == "/api/v9/channels/"+chanDMAda+"/messages" && strings.Contains(string(q.Body), want)
		}); err != nil {
			t.Fatalf("no DM reply %q: %v", want, err)
		}
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("1", chanDMAda, "", "/link BAD", false))
	replied(platform.LinkFailReply)
	e.dispatch(t, "MESSAGE_CREATE", msg("2", chanDMAda, "", "  /LINK GOOD ", false))
	replied(platform.LinkedReply)
	edit := msg("3", chanDMAda, "", "/link GOOD", false)
	edit["edited_timestamp"] = "2026-01-15T12:01:00.000000+00:00"
	e.dispatch(t, "MESSAGE_UPDATE", edit)
	e.metrics.waitDrop(t, "link_edit", 1)
	e.dispatch(t, "MESSAGE_CREATE", msg("4", chanDMAda, "", "hello", false))
	if d := e.sink.Next(t); d.Event == nil || d.Event.Text != "hello" || d.Tenant != "t1" {
		t.Fatalf("first delivery %+v, want hello to dm_tenant t1 (no /link DM delivered)", d)
	}
	linker.mu.Lock()
	calls := strings.Join(linker.calls, " ")
	linker.mu.Unlock()
	if calls != "discord/"+userAda+"/BAD discord/"+userAda+"/GOOD" {
		t.Fatalf("Link calls %q", calls)
	}
	// The registry's apply: Ada linked to t2.
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("5", chanDMAda, "", "hello again", false))
	if d := e.sink.Next(t); d.Event == nil || d.Event.Text != "hello again" || d.Tenant != "t2" {
		t.Fatalf("delivery %+v, want hello again to t2", d)
	}
	if !granted(t, e, chanDMAda, "t2") || granted(t, e, chanDMAda, "t3") {
		t.Fatal("t2 is not granted Ada's DM, or t3 is")
	}
}

// TestLinkOfAnEarlierTenantGrantsNothing: a code redeemed for a creation
// of t2 that ended (deleted and made again once Link returned) grants the
// new t2 nothing: not the user's DM (before, the grant was made for the
// creation the vault knew when Link returned, the new one).
func TestLinkOfAnEarlierTenantGrantsNothing(t *testing.T) {
	t.Parallel()
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	since := func(tenant string) time.Time {
		if tenant == "t2" {
			return again
		}
		return time.Time{}
	}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since})}, discordtest.Options{}, nil)
	e.p.deps.Linker = &codeLinker{created: first}
	e.startReady(t)
	e.dispatch(t, "MESSAGE_CREATE", msg("1", chanDMAda, "", "/link GOOD", false))
	if _, err := e.fake.WaitRequest(waitCtx(t), func(q discordtest.Request) bool {
		return q.Method == http.MethodPost && q.Path == "/api/v9/channels/"+chanDMAda+"/messages" && strings.Contains(string(q.Body), platform.LinkedReply)
	}); err != nil {
		t.Fatalf("no DM reply %q: %v", platform.LinkedReply, err)
	}
	if granted(t, e, chanDMAda, "t2") {
		t.Fatal("the new t2 was granted Ada's DM by a link of the earlier t2")
	}
}

// granted asks e's platform whether tenant may act in chat by a claim or a
// grant.
func granted(t *testing.T, e *env, chat, tenant string) bool {
	t.Helper()
	ok, err := e.p.ChatGranted(platform.WithTenant(waitCtx(t), tenant), chat, tenant)
	if err != nil {
		t.Fatalf("ChatGranted(%s, %s): %v", chat, tenant, err)
	}
	return ok != platform.HoldNone
}

// stalledLinker is a Linker whose redemptions wait until release is
// closed (a store that answers slowly), telling entered of each.
type stalledLinker struct {
	entered chan string
	release chan struct{}
}

func (l *stalledLinker) Link(ctx context.Context, _, user, _ string) (string, time.Time, error) {
	l.entered <- user
	select {
	case <-l.release:
	case <-ctx.Done():
	}
	return "", time.Time{}, platform.ErrLinkRefused
}

// TestLinkDMsDoNotHoldUpOtherTenants (issue 22): while a "/link" DM's
// redemption is stalled, another tenant's message in a channel of what was
// the DM's ingest shard (of the four workers channels were hashed to before
// chats were ingested side by side) is delivered at once; the link is
// answered in the DM once the redemption returns.
func TestLinkDMsDoNotHoldUpOtherTenants(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.Guilds["250"] = "t2" })
	shard := func(id string) uint32 {
		h := fnv.New32a()
		h.Write([]byte(id))
		return h.Sum32() % 4
	}
	busy := ""
	for i := 0; busy == ""; i++ {
		if id := strconv.Itoa(2500 + i); shard(id) == shard(chanDMAda) {
			busy = id
		}
	}
	e.fake.AddGuild(discordtest.Guild{ID: "250", Name: "Busy"}, discordtest.Channel{ID: busy, Type: 0, Name: "busy"})
	linker := &stalledLinker{entered: make(chan string, 4), release: make(chan struct{})}
	e.p.deps.Linker = linker
	e.startReady(t)
	released := false
	release := func() {
		if !released {
			released = true
			close(linker.release)
		}
	}
	t.Cleanup(release) // before Run's cleanup: a stalled redemption ends

	e.dispatch(t, "MESSAGE_CREATE", msg("1", chanDMAda, "", "/link NOT-A-CODE", false))
	select {
	case <-linker.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the /link DM's redemption to start")
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("2", busy, "250", "hello from t2", true))
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event == nil || !strings.Contains(d.Event.Text, "hello from t2") {
		t.Fatalf("delivery %s %+v, want t2's message", d.Tenant, d.Event)
	}
	release()
	if _, err := e.fake.WaitRequest(waitCtx(t), func(q discordtest.Request) bool {
		return q.Method == http.MethodPost && q.Path == "/api/v9/channels/"+chanDMAda+"/messages" && strings.Contains(string(q.Body), platform.LinkFailReply)
	}); err != nil {
		t.Fatalf("no DM reply: %v", err)
	}
}

// TestLinkDMsAreLimitedPerUser: a user's /link DMs beyond
// platform.LinkBurst are consumed unredeemed and unanswered, counted
// link_rate_limited.
func TestLinkDMsAreLimitedPerUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	linker := &codeLinker{}
	e.p.deps.Linker = linker
	e.startReady(t)
	for i := range platform.LinkBurst + 2 {
		e.dispatch(t, "MESSAGE_CREATE", msg(strconv.Itoa(10+i), chanDMAda, "", "/link BAD", false))
	}
	e.metrics.waitDrop(t, platform.DropLinkRateLimited, 2)
	e.metrics.waitDrop(t, "link_refused", platform.LinkBurst)
	e.dispatch(t, "MESSAGE_CREATE", msg("99", chanDMAda, "", "hello", false))
	if d := e.sink.Next(t); d.Event == nil || d.Event.Text != "hello" {
		t.Fatalf("delivery %+v, want hello (no /link DM delivered)", d)
	}
	linker.mu.Lock()
	defer linker.mu.Unlock()
	if len(linker.calls) != platform.LinkBurst {
		t.Fatalf("Link called %d times, want %d", len(linker.calls), platform.LinkBurst)
	}
}
