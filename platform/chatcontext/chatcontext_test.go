package chatcontext

import (
	"strings"
	"testing"
	"time"

	"connector/contract"
)

// d is a declared tenant.
var d = TenantOf("d", time.Time{})

func msg(text string) contract.ContextMessage {
	return contract.ContextMessage{Text: text, Source: contract.ContextAuthor{UserName: "ada", UserID: "1"}}
}

// TestBounds: a chat keeps its latest PerChat messages within
// BytesPerChat; messages without text are not kept; a delivery forgets
// them; the least recently used chat goes beyond Chats.
func TestBounds(t *testing.T) {
	l := New[string](Bounds{})
	for i := range DefaultPerChat + 5 {
		l.Keep(d, "c", msg(strings.Repeat("x", i+1)))
	}
	l.Keep(d, "c", msg(""))
	got := l.Pending(d, "c")
	if len(got) != DefaultPerChat || len(got[0].Text) != 6 || len(got[len(got)-1].Text) != DefaultPerChat+5 {
		t.Fatalf("kept %d messages, first %d bytes, last %d", len(got), len(got[0].Text), len(got[len(got)-1].Text))
	}
	big := strings.Repeat("y", DefaultBytesPerChat/3+1)
	for range 4 {
		l.Keep(d, "c", msg(big))
	}
	if got := l.Pending(d, "c"); len(got) != 2 {
		t.Fatalf("kept %d messages of %d bytes, want the 2 that fit in %d", len(got), len(big), DefaultBytesPerChat)
	}
	l.Delivered(d, "c")
	if got := l.Pending(d, "c"); got != nil {
		t.Fatalf("after delivery: %d messages", len(got))
	}
	// One message over the byte bound is not kept at all.
	l.Keep(d, "c", msg(strings.Repeat("z", DefaultBytesPerChat+1)))
	if l.Len() != 0 {
		t.Fatalf("an oversized message was kept")
	}

	small := New[int](Bounds{Chats: 2, PerChat: 1, BytesPerChat: 10})
	small.Keep(d, 1, msg("a"))
	small.Keep(d, 2, msg("b"))
	small.Keep(d, 1, msg("c")) // chat 1 is now the most recently used
	small.Keep(d, 3, msg("d"))
	if small.Len() != 2 || small.Pending(d, 2) != nil || len(small.Pending(d, 1)) != 1 || small.Pending(d, 1)[0].Text != "c" {
		t.Fatalf("LRU of chats: 1=%v 2=%v 3=%v", small.Pending(d, 1), small.Pending(d, 2), small.Pending(d, 3))
	}
}

// TestKeysSeparateTenants: the same chat of two tenants, or of two
// creations of one tenant id, are two chats; a declared tenant (no
// creation) and the same creation are the same tenant again. A chat keeps
// messages for one creation of an id at a time: a declared t1's, then a
// stored t1's, are not the declared t1's again once it is declared again.
func TestKeysSeparateTenants(t *testing.T) {
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	l := New[string](Bounds{})
	l.Keep(TenantOf("t1", first), "c", msg("for the first t1"))
	l.Keep(TenantOf("d1", time.Time{}), "c", msg("for d1"))
	for _, other := range []Tenant{TenantOf("t2", first), TenantOf("t1", again), TenantOf("t1", time.Time{})} {
		if got := l.Pending(other, "c"); got != nil {
			t.Fatalf("%+v sees %v", other, got)
		}
	}
	if got := l.Pending(TenantOf("t1", first.In(time.FixedZone("x", 3600))), "c"); len(got) != 1 {
		t.Fatalf("the first t1, its creation in another zone, sees %v", got)
	}
	if got := l.Pending(TenantOf("d1", time.Time{}), "c"); len(got) != 1 {
		t.Fatalf("d1 sees %v", got)
	}
	l.Keep(TenantOf("d1", again), "c", msg("for d1 stored"))
	if got := l.Pending(TenantOf("d1", time.Time{}), "c"); got != nil {
		t.Fatalf("the declared d1, once d1 was stored and kept a message, sees %v", got)
	}
	if l.Len() != 2 {
		t.Fatalf("%d chats kept, want 2: one per tenant id", l.Len())
	}
}

// TestTakeAndRestore: Take empties a chat; Restore puts the taken messages
// back before those kept since, within the bounds.
func TestTakeAndRestore(t *testing.T) {
	l := New[string](Bounds{PerChat: 3})
	l.Keep(d, "c", msg("a"))
	l.Keep(d, "c", msg("b"))
	taken := l.Take(d, "c")
	if len(taken) != 2 || l.Pending(d, "c") != nil {
		t.Fatalf("took %v, left %v", taken, l.Pending(d, "c"))
	}
	l.Keep(d, "c", msg("c"))
	l.Keep(d, "c", msg("d"))
	l.Restore(d, "c", taken)
	var texts []string
	for _, m := range l.Pending(d, "c") {
		texts = append(texts, m.Text)
	}
	if strings.Join(texts, "") != "bcd" {
		t.Fatalf("after Restore: %q, want the latest 3 in order (bcd)", texts)
	}
}

// TestTenantsShareChats: a tenant churning new chats in a full Log
// forgets its own least recently used chats, not a neighbour's; a lone
// tenant takes every chat; tenants churning together share the chats by
// weight.
func TestTenantsShareChats(t *testing.T) {
	t1, t2 := TenantOf("t1", time.Time{}), TenantOf("t2", time.Time{})
	l := New[int](Bounds{})
	for c := range 10 {
		l.Keep(t1, c, msg("before t1 was addressed"))
	}
	for c := range 5000 {
		l.Keep(t2, c, msg("t2's chatter"))
	}
	for c := range 10 {
		if got := l.Pending(t1, c); len(got) != 1 {
			t.Fatalf("t1's chat %d, after t2 churned 5,000 chats, keeps %v", c, got)
		}
	}
	if l.Len() != DefaultChats || l.Pending(t2, 4999) == nil || l.Pending(t2, 5000-DefaultChats+10) == nil || l.Pending(t2, 5000-DefaultChats+9) != nil {
		t.Fatalf("%d chats kept, want %d: t2's latest %d", l.Len(), DefaultChats, DefaultChats-10)
	}
	for c := range 10 {
		l.Delivered(t1, c)
	}
	for c := range 5000 {
		l.Keep(t2, c+5000, msg("t2 alone"))
	}
	if l.Len() != DefaultChats || l.Pending(t2, 10000-DefaultChats) == nil {
		t.Fatalf("t2 alone keeps %d chats, want %d", l.Len(), DefaultChats)
	}

	weighted := New[int](Bounds{Chats: 8, Weights: map[string]int{"t1": 3}})
	for c := range 100 {
		weighted.Keep(t1, c, msg("a"))
		weighted.Keep(t2, c, msg("b"))
	}
	var n1 int
	for c := range 100 {
		if weighted.Pending(t1, c) != nil {
			n1++
		}
	}
	if weighted.Len() != 8 || n1 != 6 {
		t.Fatalf("t1 of weight 3 keeps %d of %d chats, want 6 of 8", n1, weighted.Len())
	}
}

// TestDeletedTenantsChatsGo: t1, alone, fills the Log and is deleted; t2
// then holds every chat. Before, the Log kept the deleted t1's messages
// for good and t2 only its half, t1 holding as much for its weight.
func TestDeletedTenantsChatsGo(t *testing.T) {
	first := time.Unix(1_700_000_000, 0)
	t1, t1again, t2 := TenantOf("t1", first), TenantOf("t1", first.Add(time.Second)), TenantOf("t2", first)
	l := New[int](Bounds{Chats: 8})
	for c := range 8 {
		l.Keep(t1, c, msg("the earlier t1's"))
	}
	l.Keep(t1again, 0, msg("the new t1's"))
	l.SetTenants(map[string]time.Time{"t1": first.Add(time.Second), "t2": first})
	if l.Len() != 1 || l.Pending(t1again, 0) == nil {
		t.Fatalf("%d chats kept once t1 was made again, want the new t1's one", l.Len())
	}
	l.SetTenants(map[string]time.Time{"t2": first})
	for c := range 8 {
		l.Keep(t2, c, msg("t2's"))
	}
	for c := range 8 {
		if l.Pending(t2, c) == nil {
			t.Fatalf("t2's chat %d forgotten with the deleted t1's gone; %d chats kept", c, l.Len())
		}
	}
}

// BenchmarkKeep: a message for a new chat of one of two tenants, the Log
// full (each forgets one of its chats), and one for a chat it holds.
func BenchmarkKeep(b *testing.B) {
	l := New[int](Bounds{})
	tenants := []Tenant{TenantOf("t1", time.Time{}), TenantOf("t2", time.Time{})}
	m := msg("hello")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Keep(tenants[i%2], i, m)
		l.Keep(tenants[i%2], i, m)
		i++
	}
}
