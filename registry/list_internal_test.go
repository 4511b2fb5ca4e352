package registry

import (
	"context"
	"testing"

	"connector/internal/clock"
	"connector/store"
)

// TestListKeepsWhatIsStored: the decoded entries a list keeps for the next
// are those of the namespace as it read it: one deleted from the store,
// or replaced by a value that does not decode, leaves them.
func TestListKeepsWhatIsStored(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory(clock.System)
	t.Cleanup(func() { _ = st.Close() })
	r := New(st, clock.System)
	for _, id := range []string{"gw1", "gw2", "gw3"} {
		if _, err := r.kv.Put(ctx, nsGateways, id, []byte(`{"id":"`+id+`","tenant":"acme"}`)); err != nil {
			t.Fatal(err)
		}
	}
	var gws []Gateway
	if err := list(ctx, r, nsGateways, &gws, nil); err != nil || len(gws) != 3 || len(r.listed[nsGateways]) != 3 {
		t.Fatalf("first list: %d gateways, %d kept, %v", len(gws), len(r.listed[nsGateways]), err)
	}
	if _, err := r.kv.Delete(ctx, nsGateways, "gw1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.kv.Put(ctx, nsGateways, "gw2", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	gws = nil
	if err := list(ctx, r, nsGateways, &gws, nil); err != nil || len(gws) != 1 || gws[0].ID != "gw3" {
		t.Fatalf("second list: %+v, %v: want gw3", gws, err)
	}
	if kept := r.listed[nsGateways]; len(kept) != 1 || kept["gw3"].v == nil {
		t.Fatalf("kept after the second list: %v: want gw3 alone", kept)
	}
}
