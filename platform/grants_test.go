package platform_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/platform"
	"connector/store"
	"connector/vault"
)

// TestGrantsSharedThroughTheStore: a grant one instance makes is seen by
// another instance on the same store (memory and a real redis-server),
// not by another tenant or chat; it expires vault.ChatGrantTTL after the
// last renewal, and a renewal made on one instance keeps it alive on the
// other, whose in-memory front held the older grant.
func TestGrantsSharedThroughTheStore(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			cfg := store.Config{Backend: backend, Clock: clk}
			if backend == store.BackendRedis {
				cfg.RedisURL = redistest.Start(t, redistest.Options{}).URL()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := store.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			a := platform.NewGrants("discord", vault.NewDurable(st.Capabilities(), vault.Config{Clock: clk}), clk, nil)
			b := platform.NewGrants("discord", vault.NewDurable(st.Capabilities(), vault.Config{Clock: clk}), clk, nil)

			if b.Has(t.Context(), "501", "t2") {
				t.Fatal("granted before any message")
			}
			a.Add(t.Context(), "501", "", "t2", time.Time{})
			if !b.Has(t.Context(), "501", "t2") || !a.Has(t.Context(), "501", "t2") {
				t.Fatal("the grant made on a is not seen on both instances")
			}
			if b.Has(t.Context(), "501", "t1") || b.Has(t.Context(), "502", "t2") || b.Has(t.Context(), "", "t2") || b.Has(t.Context(), "501", "") {
				t.Fatal("a grant leaked to another tenant or chat")
			}

			// A renewal past half the TTL, on a, outlives b's cached copy.
			clk.Advance(vault.ChatGrantTTL/2 + time.Minute)
			a.Add(t.Context(), "501", "", "t2", time.Time{})
			clk.Advance(vault.ChatGrantTTL/2 + time.Minute)
			if !b.Has(t.Context(), "501", "t2") {
				t.Fatal("the grant renewed on a expired on b")
			}
			// Without a renewal it expires everywhere.
			clk.Advance(vault.ChatGrantTTL)
			if a.Has(t.Context(), "501", "t2") || b.Has(t.Context(), "501", "t2") {
				t.Fatal("the grant outlived its TTL")
			}
		})
	}
}

// TestGrantsWithoutVault: with no vault the grants are the process's own.
func TestGrantsWithoutVault(t *testing.T) {
	g := platform.NewGrants("telegram", nil, nil, nil)
	g.Add(t.Context(), "-100", "", "t1", time.Time{})
	if !g.Has(t.Context(), "-100", "t1") || g.Has(t.Context(), "-100", "t2") {
		t.Fatal("a process-local grant is not kept, or kept for another tenant")
	}
}

// TestGrantsRecordTheirSpace: a grant keeps the space it was made in, and
// a renewal from another space (a Slack Connect channel's other
// workspace) records that one at once.
func TestGrantsRecordTheirSpace(t *testing.T) {
	g := platform.NewGrants("telegram", nil, nil, nil)
	g.Add(t.Context(), "C1", "T1", "t1", time.Time{})
	if space, ok, _ := g.Granted(t.Context(), "C1", "t1"); !ok || space != "T1" {
		t.Fatalf("granted %v in %q", ok, space)
	}
	g.Add(t.Context(), "C1", "T2", "t1", time.Time{})
	if space, _, _ := g.Granted(t.Context(), "C1", "t1"); space != "T2" {
		t.Fatalf("renewed in T2, recorded %q", space)
	}
	if _, ok, _ := g.Granted(t.Context(), "C1", "t2"); ok {
		t.Fatal("another tenant holds the grant")
	}
}

// TestGrantedInTheSpace: a grant made in a space is found by the space
// (GrantedIn), for its tenant and platform only, and lasts as the grant
// does; the record of the space grants nothing in a chat of the space's
// id (a Discord guild's first channel may share it).
func TestGrantedInTheSpace(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	v := vault.NewMemory(vault.Config{Clock: clk})
	g := platform.NewGrants("discord", v, clk, nil)
	g.Add(t.Context(), "501", "500", "t1", time.Time{})
	in := func(name, id, tenant string) bool {
		t.Helper()
		ok, err := platform.GrantedIn(t.Context(), v, name, id, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !in("discord", "500", "t1") || !in("discord", "501", "t1") {
		t.Fatal("the grant is not found by its space or its chat")
	}
	if in("discord", "500", "t2") || in("slack", "500", "t1") || g.Has(t.Context(), "500", "t1") {
		t.Fatal("the space's record reaches another tenant or platform, or grants a chat of its id")
	}
	clk.Advance(vault.ChatGrantTTL/2 - time.Minute)
	g.Add(t.Context(), "502", "500", "t1", time.Time{}) // a second chat's grant, while the space's record is fresh
	clk.Advance(vault.ChatGrantTTL/2 + 2*time.Minute)
	if !g.Has(t.Context(), "502", "t1") || !in("discord", "500", "t1") {
		t.Fatal("the space's record lapsed before the grant of a chat in it")
	}
	clk.Advance(vault.ChatGrantTTL)
	if in("discord", "500", "t1") {
		t.Fatal("the space's record outlived the grant")
	}
}

// TestGrantsKeyedByPlatform: the platforms share one vault (as the
// connector's do) and chat ids that coincide (a Telegram private chat's
// id, a Discord snowflake, a WhatsApp number are all digits): a grant made
// on one platform grants nothing on another, to its tenant or any other,
// on the durable vault (memory and a real redis-server) and read by
// another instance too.
func TestGrantsKeyedByPlatform(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			cfg := store.Config{Backend: backend, Clock: clk}
			if backend == store.BackendRedis {
				cfg.RedisURL = redistest.Start(t, redistest.Options{}).URL()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := store.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			shared := vault.NewDurable(st.Capabilities(), vault.Config{Clock: clk})
			tg := platform.NewGrants("telegram", shared, clk, nil)
			dc := platform.NewGrants("discord", shared, clk, nil)
			dcElsewhere := platform.NewGrants("discord", vault.NewDurable(st.Capabilities(), vault.Config{Clock: clk}), clk, nil)

			tg.Add(t.Context(), "801", "", "t1", time.Time{})
			dc.Add(t.Context(), "802", "G", "t2", time.Time{})
			if !tg.Has(t.Context(), "801", "t1") || !dc.Has(t.Context(), "802", "t2") || !dcElsewhere.Has(t.Context(), "802", "t2") {
				t.Fatal("a grant is not seen on its own platform")
			}
			for _, c := range []struct {
				g          *platform.Grants
				on, tenant string
				chat       string
			}{
				{dc, "discord", "t1", "801"}, {dcElsewhere, "discord (another instance)", "t1", "801"},
				{dc, "discord", "t2", "801"}, {tg, "telegram", "t2", "802"}, {tg, "telegram", "t1", "802"},
			} {
				if space, ok, _ := c.g.Granted(t.Context(), c.chat, c.tenant); ok {
					t.Errorf("%s holds a grant of %s on %s (space %q) made on another platform", c.tenant, c.chat, c.on, space)
				}
			}
		})
	}
}

// TestPostedWhenTheOpsContextEnded: an op that posted a message answers
// it even when its ctx ended as it returned (its deadline reached on the
// way back, the relay's connection gone); the mark that the message is
// the tenant's is stored all the same (a real redis-server, which refuses
// a command on an ended ctx), so the tenant may edit it after.
func TestPostedWhenTheOpsContextEnded(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, Clock: clk, RedisURL: redistest.Start(t, redistest.Options{}).URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p := &chatsPlatform{granted: map[string]string{"shared": "t1"}}
	opCtx, endOp := context.WithCancel(t.Context())
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpSend: func(_ *chatsPlatform, _ context.Context, _, _ string, _ *contract.Action) contract.Result {
				endOp()
				return contract.OK("m1")
			},
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", vault.NewDurable(st.Capabilities(), vault.Config{Clock: clk}), clk, nil),
	}
	if r := platform.Execute(opCtx, &e, p, "t1", &contract.Action{Op: contract.OpSend, ChatID: "shared", Content: "hi"}); !r.Success || r.MessageID != "m1" {
		t.Fatalf("send: %+v", r)
	}
	if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpEdit, ChatID: "shared", MessageID: "m1", Content: "hi!"}); !r.Success {
		t.Fatalf("edit of the tenant's own message, posted as its op's ctx ended: %+v", r)
	}
}

// TestMarksOfAnOpThatOutlivedItsTenant: t1 holds a chat by grant, and its
// send and prompt there return once t1 was deleted and made again under
// its id (the registry's apply moves the vault's Since first, then the
// relay revokes the earlier t1's ops: a message or the first part of one
// may have gone out). Their marks are stored under the creation the ops
// were authorized under, so the new t1 may neither edit the earlier t1's
// message nor receive the presses of its prompt. Before, they were stored
// as the new t1's.
func TestMarksOfAnOpThatOutlivedItsTenant(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	began := clk.Now().Add(-time.Hour)
	since := func(string) time.Time { mu.Lock(); defer mu.Unlock(); return began }
	remade := func() { mu.Lock(); began = clk.Now(); mu.Unlock() }
	p := &chatsPlatform{granted: map[string]string{"shared": "t1"}}
	v := vault.NewMemory(vault.Config{Clock: clk, Since: since})
	g := platform.NewGrants("chats", v, clk, nil)
	posting := func(id string) platform.Op[*chatsPlatform, string] {
		return func(_ *chatsPlatform, _ context.Context, _, _ string, _ *contract.Action) contract.Result {
			remade() // the apply, while the op was on its way back
			clk.Advance(time.Second)
			return contract.OK(id)
		}
	}
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpSend:   posting("m1"),
			contract.OpPrompt: posting("p1"),
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: g,
		Vault:  v,
	}
	if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpSend, ChatID: "shared", Content: "hi"}); !r.Success {
		t.Fatalf("the earlier t1's send: %+v", r)
	}
	if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpEdit, ChatID: "shared", MessageID: "m1", Content: "mine"}); r.Success || r.Code != contract.CodeEgressDeclined {
		t.Errorf("the new t1's edit of the earlier t1's message: %+v, want egress_declined", r)
	}
	if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpPrompt, ChatID: "shared", Content: "ok?"}); !r.Success {
		t.Fatalf("the earlier t1's prompt: %+v", r)
	}
	if tenant, _, ok, err := g.PromptPoster(t.Context(), nil, "u1", platform.Chat{ID: "shared"}, "p1", "t1"); err != nil || ok {
		t.Errorf("a press of the earlier t1's prompt goes to %q, the new t1 (err %v)", tenant, err)
	}
}

// TestThreadGrantLastsAsTheChatGrant: a thread tenant t2 created in a
// chat it holds by grant is granted to t2 alone, in the chat's space, and
// ends with the chat's grant, not a TTL after its creation; a thread made
// where t2's grant is gone is granted nothing.
func TestThreadGrantLastsAsTheChatGrant(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	g := platform.NewGrants("discord", vault.NewMemory(vault.Config{Clock: clk}), clk, nil)
	g.Add(t.Context(), "C1", "G1", "t2", time.Time{})
	g.Add(t.Context(), "C1", "G1", "t3", time.Time{})
	clk.Advance(vault.ChatGrantTTL / 2)
	g.AddThread(t.Context(), "C1", "TH1", "t2")
	if space, ok, _ := g.Granted(t.Context(), "TH1", "t2"); !ok || space != "G1" {
		t.Fatalf("t2's thread granted %v in %q, want in G1", ok, space)
	}
	if g.Has(t.Context(), "TH1", "t3") {
		t.Fatal("t2's thread granted to t3, which holds its channel too")
	}
	clk.Advance(vault.ChatGrantTTL/2 + time.Minute)
	if g.Has(t.Context(), "C1", "t2") || g.Has(t.Context(), "TH1", "t2") {
		t.Fatal("the thread's grant outlived the chat grant it was made on")
	}
	g.AddThread(t.Context(), "C1", "TH2", "t2")
	if g.Has(t.Context(), "TH2", "t2") {
		t.Fatal("a thread granted on an expired grant")
	}
}

// TestGrantsOfAnEarlierTenant: t1 holds a chat by grant and posted a
// message there; t1 is deleted and made again under its id (the vault's
// Since moves to its new start), on a real redis-server. The new t1 holds
// neither the grant nor the mark, neither on the instance that stored the
// mark (which answers its marks from memory) nor on another; what it
// stores itself counts. So too when the instance that created the new t1
// has a clock 5 s behind (skewed): the entries were told apart by when
// they were stored, which that skew got wrong, so the new t1 held the
// grant and could edit the earlier t1's message.
func TestGrantsOfAnEarlierTenant(t *testing.T) {
	for _, skewed := range []bool{false, true} {
		t.Run(fmt.Sprintf("skewed %v", skewed), func(t *testing.T) { grantsOfAnEarlierTenant(t, skewed) })
	}
}

// grantsOfAnEarlierTenant is TestGrantsOfAnEarlierTenant, the earlier t1
// stored with a creation and the new one created by a clock 5 s behind
// (skewed), or the earlier one stored without one.
func grantsOfAnEarlierTenant(t *testing.T, skewed bool) {
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, Clock: clk, RedisURL: redistest.Start(t, redistest.Options{}).URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var began time.Time
	cfg := vault.Config{Clock: clk, Since: func(tenant string) time.Time {
		if tenant == "t1" {
			return began
		}
		return time.Time{}
	}}
	if skewed {
		began = clk.Now().Add(-time.Hour)
	}
	a := platform.NewGrants("chats", vault.NewDurable(st.Capabilities(), cfg), clk, nil)
	b := platform.NewGrants("chats", vault.NewDurable(st.Capabilities(), cfg), clk, nil)
	a.Add(t.Context(), "shared", "", "t1", time.Time{})
	a.Posted(t.Context(), "shared", "m1", "t1", time.Time{})
	for name, g := range map[string]*platform.Grants{"a": a, "b": b} {
		if !g.Has(t.Context(), "shared", "t1") || !g.PostedBy(t.Context(), "shared", "m1", "t1") {
			t.Fatalf("instance %s: t1's grant or mark not found before t1 was made again", name)
		}
	}
	clk.Advance(time.Second)
	began = clk.Now()
	if skewed {
		began = began.Add(-5 * time.Second)
	}
	for name, g := range map[string]*platform.Grants{"a": a, "b": b} {
		if g.Has(t.Context(), "shared", "t1") {
			t.Errorf("instance %s: the new t1 holds the earlier t1's grant", name)
		}
		if g.PostedBy(t.Context(), "shared", "m1", "t1") {
			t.Errorf("instance %s: the new t1 may edit the earlier t1's message", name)
		}
	}
	clk.Advance(time.Second)
	a.Add(t.Context(), "shared", "", "t1", time.Time{})
	a.Posted(t.Context(), "shared", "m2", "t1", time.Time{})
	for name, g := range map[string]*platform.Grants{"a": a, "b": b} {
		if !g.Has(t.Context(), "shared", "t1") || !g.PostedBy(t.Context(), "shared", "m2", "t1") {
			t.Errorf("instance %s: the new t1's own grant or mark not found", name)
		}
	}
}

// linkerOf links every code to tenant t2 as created at created.
type linkerOf struct{ created time.Time }

func (l linkerOf) Link(context.Context, string, string, string) (string, time.Time, error) {
	return "t2", l.created, nil
}

// TestLinkGrantIsTheIssuingCreations: the DM grant of a /link is stored
// for the creation of t2 that issued the code, so t2 deleted and made
// again between RedeemLink's check of that creation and the grant's write
// (the registry's apply moving the vault's Since) is not granted the DM.
// Before, Add stamped the grant with the creation the vault knew when it
// wrote, the new one.
func TestLinkGrantIsTheIssuingCreations(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	first := clk.Now().Add(-time.Hour)
	var mu sync.Mutex
	began := first
	since := func(string) time.Time { mu.Lock(); defer mu.Unlock(); return began }
	v := vault.NewMemory(vault.Config{Clock: clk, Since: since})
	g := platform.NewGrants("chats", v, clk, nil)
	d := platform.Deps{Linker: linkerOf{created: first}, Vault: v}.WithDefaults()
	reply := d.RedeemLink(t.Context(), "chats", "u1", "CODE", func(tenant string, created time.Time) {
		mu.Lock()
		began = clk.Now() // the apply, after RedeemLink judged the creation
		mu.Unlock()
		g.Add(t.Context(), "dm", "", tenant, created)
	})
	if reply != platform.LinkedReply {
		t.Fatalf("reply %q, want %q", reply, platform.LinkedReply)
	}
	if g.Has(t.Context(), "dm", "t2") {
		t.Fatal("the t2 made again was granted the DM by the earlier t2's link code")
	}
}

// TestReadRecordEndsWithItsEntry: a posted message's record another
// instance read late in its life is not kept past vault.ChatGrantTTL
// after it was stored: neither its tenant's edit by grant nor another
// tenant's decline outlives it.
func TestReadRecordEndsWithItsEntry(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	v := vault.NewMemory(vault.Config{Clock: clk})
	a := platform.NewGrants("chats", v, clk, nil)
	b := platform.NewGrants("chats", v, clk, nil)
	a.Posted(t.Context(), "shared", "m1", "t1", time.Time{})
	clk.Advance(vault.ChatGrantTTL - time.Hour)
	if another, err := b.PostedByAnother(t.Context(), "shared", "m1", "t2"); !another || err != nil {
		t.Fatalf("t1's record read at hour 23: another %v, err %v", another, err)
	}
	clk.Advance(2 * time.Hour)
	if another, err := b.PostedByAnother(t.Context(), "shared", "m1", "t2"); another || err != nil {
		t.Errorf("t1's record read at hour 23, asked at hour 25: another %v, err %v, want none", another, err)
	}
	if b.PostedBy(t.Context(), "shared", "m1", "t1") {
		t.Error("t1's record read at hour 23 lets it edit the message at hour 25")
	}
}

// TestPostedRenewsARecordReadLate: a message answered again on an instance
// that read its record late in its life (a Slack stream's frames after its
// gateway moved) stores the record again, so it lasts its TTL from then.
func TestPostedRenewsARecordReadLate(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	v := vault.NewMemory(vault.Config{Clock: clk})
	a := platform.NewGrants("chats", v, clk, nil)
	b := platform.NewGrants("chats", v, clk, nil)
	a.Posted(t.Context(), "shared", "m1", "t1", time.Time{})
	clk.Advance(vault.ChatGrantTTL - time.Hour)
	if !b.PostedBy(t.Context(), "shared", "m1", "t1") {
		t.Fatal("t1's record not read at hour 23")
	}
	b.Posted(t.Context(), "shared", "m1", "t1", time.Time{})
	clk.Advance(2 * time.Hour)
	if !b.PostedBy(t.Context(), "shared", "m1", "t1") {
		t.Error("t1's message answered again at hour 23 is not its own at hour 25")
	}
}
