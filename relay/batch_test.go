package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
)

// batchDelivery is inbound message text from chat of tenant, as the fake
// platform's deliver builds it.
func batchDelivery(tenant, chatID, userID, text string) platform.Delivery {
	ev := &contract.Event{Text: text, MessageID: "msg-" + text}
	ev.Source.Platform = "discord"
	ev.Source.ChatID = chatID
	ev.Source.ChatType = "group"
	ev.Source.UserID.Value, ev.Source.UserID.Valid = userID, true
	return platform.Delivery{
		Kind: platform.KindInbound, Tenant: tenant, Platform: "discord",
		SessionKey: sessionKey("discord", chatID, userID), ChatID: chatID, Event: ev, Received: time.Now(),
	}
}

// A batch of one source's deliveries (a Telegram getUpdates answer of 100)
// is made durable in one commit of the embedded store, not one per
// delivery; a batch spread over two tenants and cut by an interrupt still
// reaches each tenant's gateway whole and in order.
func TestDeliverAllCommitsABatchOnce(t *testing.T) {
	st, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p := newFake("discord", map[string]string{"c1": "t1", "c1b": "t1", "c2": "t2"})
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p},
		Store: st, Log: relaytest.TestLogger(t)})
	sink, ok := p.runningSink().(platform.BatchSink)
	if !ok {
		t.Fatal("the relay's sink takes no batches (platform.BatchSink)")
	}
	// The first append of a tenant reserves its sequence numbers in a
	// commit of its own.
	p.deliver("t1", "c1", "u1", "warm-0")
	p.deliver("t2", "c2", "u2", "warm-0")
	commits := func() uint64 { return st.(store.Committer).CommitStats().Commits }

	var batch []platform.Delivery
	for i := range 100 {
		batch = append(batch, batchDelivery("t1", "c1", "u1", fmt.Sprintf("one-%d", i)))
	}
	before := commits()
	if errs := sink.DeliverAll(context.Background(), batch); errs != nil {
		t.Fatalf("DeliverAll refused deliveries: %v", errs)
	}
	if n := commits() - before; n != 1 {
		t.Fatalf("a batch of 100 deliveries for one tenant took %d store commits, want 1", n)
	}

	batch = batch[:0]
	var want1, want2 []string
	for i := range 30 {
		chat, tenant, user := "c1", "t1", "u1"
		switch i % 3 {
		case 1:
			chat = "c1b"
		case 2:
			chat, tenant, user = "c2", "t2", "u2"
		}
		text := fmt.Sprintf("mixed-%d", i)
		batch = append(batch, batchDelivery(tenant, chat, user, text))
		if tenant == "t1" {
			want1 = append(want1, text)
		} else {
			want2 = append(want2, text)
		}
		if i == 14 {
			batch = append(batch, platform.Delivery{Kind: platform.KindInterrupt, Tenant: "t2", Platform: "discord",
				SessionKey: sessionKey("discord", "c2", "u2"), ChatID: "c2"})
		}
	}
	if errs := sink.DeliverAll(context.Background(), batch); errs != nil {
		t.Fatalf("DeliverAll refused deliveries: %v", errs)
	}

	gw1 := h.Dial(t, "gw1", "s1")
	gw1.Hello(t, "discord", "")
	expect(t, gw1, "warm-0")
	for i := range 100 {
		expect(t, gw1, fmt.Sprintf("one-%d", i))
	}
	for _, text := range want1 {
		expect(t, gw1, text)
	}
	gw2 := h.Dial(t, "gw2", "s2")
	gw2.Hello(t, "discord", "")
	expect(t, gw2, "warm-0")
	for _, text := range want2 {
		expect(t, gw2, text)
	}
}

// expect reads gw's next inbound and acknowledges it; its text must be want.
func expect(t *testing.T, gw *relaytest.Gateway, want string) {
	t.Helper()
	ev, id := gw.NextInbound(t)
	if ev.Text != want {
		t.Fatalf("gateway got %q, want %q", ev.Text, want)
	}
	gw.Ack(t, id)
}

// errRefused is the store error of refusingLedger.
var errRefused = errors.New("refusingLedger: write refused")

// refusingStore is a store whose ledger refuses the next write of tenant
// refuse (once), as a failed commit would.
type refusingStore struct {
	store.Store
	refuse string
	done   atomic.Bool
}

func (s *refusingStore) Ledger() store.Ledger { return refusingLedger{s.Store.Ledger(), s} }

type refusingLedger struct {
	store.Ledger
	s *refusingStore
}

func (l refusingLedger) Stage(ctx context.Context, tenant string, recs []store.Record) ([]uint64, func() error, error) {
	if tenant == l.s.refuse && l.s.done.CompareAndSwap(false, true) {
		return nil, nil, errRefused
	}
	return l.Ledger.Stage(ctx, tenant, recs)
}

// A batch whose first write for a tenant is refused refuses every later
// delivery of that tenant too, an interrupt (a Telegram "/stop") and a
// message after it: the source delivers them again after the refused one,
// so they reach the gateway in order, the interrupt after the message it
// followed. Another tenant's deliveries are taken.
func TestDeliverAllKeepsOrderAfterARefusedWrite(t *testing.T) {
	st := &refusingStore{Store: store.NewMemory(nil), refuse: "t1"}
	t.Cleanup(func() { _ = st.Close() })
	p := newFake("discord", map[string]string{"c1": "t1", "c2": "t2"})
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p},
		Store: st, Log: relaytest.TestLogger(t)})
	sink := p.runningSink().(platform.BatchSink)
	stop := platform.Delivery{Kind: platform.KindInterrupt, Tenant: "t1", Platform: "discord",
		SessionKey: sessionKey("discord", "c1", "u1"), ChatID: "c1"}
	batch := []platform.Delivery{
		batchDelivery("t1", "c1", "u1", "before"),
		batchDelivery("t2", "c2", "u2", "other"),
		stop,
		batchDelivery("t1", "c1", "u1", "after"),
	}
	errs := sink.DeliverAll(context.Background(), batch)
	if errs == nil {
		t.Fatal("DeliverAll took every delivery; the store refused t1's write")
	}
	for i, want := range []bool{true, false, true, true} {
		if got := errs[i] != nil; got != want {
			t.Errorf("delivery %d (kind %d of %s): refused %v (%v), want %v", i, batch[i].Kind, batch[i].Tenant, got, errs[i], want)
		}
	}
}

// A delivery of no kind the relay knows is dropped, by Deliver and in a
// batch alike, without an error (the platform would deliver it again
// forever) and without stopping the deliveries around it.
func TestDeliveryOfAnUnknownKindIsDropped(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	sink := p.runningSink().(platform.BatchSink)
	odd := batchDelivery("t1", "c1", "u1", "odd")
	odd.Kind = 99
	if err := sink.Deliver(context.Background(), odd); err != nil {
		t.Fatalf("Deliver of an unknown kind: %v, want it dropped", err)
	}
	batch := []platform.Delivery{odd, batchDelivery("t1", "c1", "u1", "after"), odd}
	if errs := sink.DeliverAll(context.Background(), batch); errs != nil {
		t.Fatalf("DeliverAll with an unknown kind: %v, want it dropped", errs)
	}
	if ev, id := gw.NextInbound(t); ev.Text != "after" {
		t.Fatalf("inbound %q (%s), want the delivery after the unknown kind", ev.Text, id)
	}
	p.deliver("t1", "c1", "u1", "last")
	if ev, _ := gw.NextInbound(t); ev.Text != "last" {
		t.Fatalf("inbound %q, want last: an unknown kind reached the gateway", ev.Text)
	}
}
