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
