package telegram

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"strconv"
	"testing"

	"connector/contract"
	"connector/platform"
)

// TestDraftIDOfAnotherTenantCannotBeComputed: in the DM of a user linked
// to t1 (its home) and t2, served by two instances, t2's draft_id 1 reaches
// Telegram under an id hashed from t2 and 1. That hash was FNV-1a of public
// data, so t1, the home, whose draft_ids go out unchanged, computed t2's id
// and streamed its own frames under it: the user's DM showed t1's text in
// place of t2's draft. The id is now keyed by a secret of the connector's
// (the bot token), which no tenant can compute.
func TestDraftIDOfAnotherTenantCannotBeComputed(t *testing.T) {
	e := newEnv(t, nil)
	other, err := New(e.p.cfg, platform.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.transport.CloseIdleConnections)
	bindings := []platform.Binding{
		{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		{Kind: platform.BindUser, ID: "501", Tenant: "t2"},
	}
	for _, p := range []*Platform{e.p, other} {
		if err := p.Bind(bindings); err != nil {
			t.Fatal(err)
		}
	}
	frame := func(p *Platform, tenant string, draft int64, content string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		a := contract.Action{Op: contract.OpDraft, ChatID: "501", DraftID: draft, Content: content}
		if r := p.Execute(ctx, tenant, &a); !r.Success {
			t.Fatalf("%s draft %q: %+v", tenant, content, r)
		}
	}
	// What t1 computes from t2's tenant id and the gateway's numbering from 1.
	h := fnv.New64a()
	h.Write([]byte("t2"))
	h.Write(binary.AppendVarint(binary.AppendUvarint([]byte{0}, 0), 1))
	guess := 1<<30 + int64(h.Sum64()%(1<<30))

	frame(other, "t2", 1, "t2 thinking")
	frame(e.p, "t1", guess, "t1 forged")
	ids := map[string]string{}
	for _, c := range e.calls(t, "sendMessageDraft", 2) {
		ids[c.Form["text"][:2]] = c.Form["draft_id"]
	}
	if ids["t1"] == ids["t2"] {
		t.Fatalf("t1's frame went out under t2's draft_id %s", ids["t2"])
	}
	n, _ := strconv.ParseInt(ids["t2"], 10, 64)
	if text, ok := e.fake.Draft(501, 0, n); !ok || text != "t2 thinking" {
		t.Errorf("t2's draft %d shows %q (%v)", n, text, ok)
	}
}
